package arq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Config tunes an Endpoint. Zero values take the defaults shown.
type Config struct {
	MTU         int           // largest datagram, bytes (1200, at least 256)
	AckEvery    int           // acknowledge after this many data packets (32)
	AckDelay    time.Duration // ... or this long after the first unacknowledged one (50ms)
	BundleDelay time.Duration // wait up to this long to fill a datagram; <0 disables (1ms)
	Window      int           // packets the receiver buffers out of order (4096, at most 2^21)
	MaxMessage  int           // largest message (1 MiB)
	MaxQueued   int           // bytes queued for sending before Send refuses (16 MiB)
	MinRTO      time.Duration // 200ms
	MaxRTO      time.Duration // 10s
	InitialRTO  time.Duration // 1s (RFC 6298)
}

func (c *Config) defaults() {
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&c.MTU, 1200)
	c.MTU = max(c.MTU, minMTU)
	set(&c.AckEvery, 32)
	set(&c.Window, 4096)
	c.Window = min(c.Window, maxWindow)
	set(&c.MaxMessage, 1<<20)
	set(&c.MaxQueued, 16<<20)
	setD(&c.AckDelay, 50*time.Millisecond)
	setD(&c.BundleDelay, time.Millisecond)
	setD(&c.MinRTO, 200*time.Millisecond)
	setD(&c.MaxRTO, 10*time.Second)
	setD(&c.InitialRTO, time.Second)
}

// Errors callers branch on.
var (
	ErrTooLarge  = errors.New("udp: message larger than MaxMessage")
	ErrQueueFull = errors.New("udp: send queue full")
)

// Stats counts what an Endpoint sent; coordination packets are those that carry no
// new payload (acknowledgements, NAKs, probes without data).
type Stats struct {
	DataPackets  uint64
	CoordPackets uint64
	Retransmits  uint64
	NaksSent     uint64
	Delivered    uint64
	Duplicates   uint64
	RTT          time.Duration // smoothed
	RTO          time.Duration
	Cwnd         float64
	Inflight     int
	Queued       int // bytes waiting to be packetized
}

// Add sums the counters of o into s; the gauges (RTT, RTO, Cwnd, Inflight,
// Queued) are left as they are.
func (s *Stats) Add(o *Stats) {
	s.DataPackets += o.DataPackets
	s.CoordPackets += o.CoordPackets
	s.Retransmits += o.Retransmits
	s.NaksSent += o.NaksSent
	s.Delivered += o.Delivered
	s.Duplicates += o.Duplicates
}

type sentPacket struct {
	seq     uint64
	frames  []byte // the frames; the header is rebuilt on each send
	full    bool   // the frames filled the datagram: padded to exactly the MTU
	sentAt  time.Time
	retrans int
	nakAt   time.Time // last retransmission caused by a NAK
}

// Endpoint is one side of a reliable session. It is not safe for concurrent use; the
// caller serialises Send, Receive and Tick and collects Output after each.
type Endpoint struct {
	cfg Config

	// Sending. Messages not yet packetized are qbuf[qhead:], their lengths qlens
	// (qlens[0] counts only what is left of a message partly in packets already):
	// one buffer for all, so that queueing a message allocates nothing.
	qbuf       []byte
	qhead      int
	qlens      []int
	queueOff   int // bytes of the first queued message already in packets
	queued     int
	queuedAt   time.Time // when the oldest queued byte arrived
	nextSeq    uint64
	unacked    []*sentPacket // by seq
	peerCum    uint64        // all below are acknowledged
	peerWnd    uint64
	peerHeld   uint64 // packets the peer holds above peerCum
	srtt       time.Duration
	rttvar     time.Duration
	rto        time.Duration
	rtoAt      time.Time
	probeAt    time.Time
	probed     bool
	lastSend   time.Time
	cwnd       float64
	ssthresh   float64
	recovery   uint64 // no further window cut until this seq is acknowledged
	minRTT     time.Duration
	minRTTAt   time.Time
	lastRTT    time.Duration
	roundStart uint64 // the current measuring round: packets [roundStart, roundEnd)
	roundEnd   uint64
	roundLost  int       // packets of the round reported lost
	lossAt     time.Time // the latest loss reported or timed out
	paceAt     time.Time // no new packet before this
	paceWait   bool      // the last flush stopped at paceAt
	retransmit []*sentPacket
	spare      []*sentPacket // acknowledged, reused with their frame buffers

	// Receiving.
	cum        uint64 // next expected sequence
	ooo        map[uint64][]byte
	highest    uint64
	ackCount   int
	ackDue     time.Time
	ackNow     bool
	nakSentAt  map[uint64]time.Time
	nakRTT     time.Duration // smoothed time from a NAK to the repair's arrival
	oooCount   int           // out-of-order arrivals since the last acknowledgement
	unread     int           // delivered bytes the application has not consumed
	advertised uint64        // the window in our last acknowledgement
	wndDue     time.Time     // repeat a window update then, until data arrives
	lastArr    uint64        // the data packet that arrived last, and when
	lastArrAt  time.Time
	nakDue     time.Time // gaps are reported again then, even if no data arrives
	partial    []byte
	inMsg      bool

	// Output since the last Output call: datagrams and messages live in one buffer
	// each, reused, so that neither costs an allocation.
	outBuf   []byte
	outEnds  []int
	outViews [][]byte
	delBuf   []byte
	delEnds  []int
	delViews [][]byte
	stats    Stats
	scratch  []nakRange
}

// New makes an Endpoint.
func New(cfg Config) *Endpoint {
	cfg.defaults()
	return &Endpoint{
		cfg: cfg, nextSeq: 1, peerCum: 1, peerWnd: uint64(cfg.Window), rto: cfg.InitialRTO,
		cwnd: 16, ssthresh: math.Inf(1), cum: 1, advertised: uint64(cfg.Window),
		ooo: make(map[uint64][]byte), nakSentAt: make(map[uint64]time.Time),
	}
}

// Send queues a message for reliable, in-order delivery.
func (e *Endpoint) Send(now time.Time, msg []byte) error {
	if len(msg) > e.cfg.MaxMessage {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(msg))
	}
	if e.queued+len(msg) > e.cfg.MaxQueued {
		return ErrQueueFull
	}
	if len(e.qlens) == 0 {
		e.queuedAt = now
	}
	if e.qhead > 0 && e.qhead >= len(e.qbuf)/2 {
		// Reclaim the front of the buffer, already in packets.
		e.qbuf = e.qbuf[:copy(e.qbuf, e.qbuf[e.qhead:])]
		e.qhead = 0
	}
	e.qbuf = append(e.qbuf, msg...)
	e.qlens = append(e.qlens, len(msg))
	e.queued += len(msg)
	e.flush(now)
	return nil
}

// Receive handles a datagram from the peer. A malformed one is refused with an error
// and changes nothing.
func (e *Endpoint) Receive(now time.Time, b []byte) error {
	h, err := decodeHeader(b, e.scratch)
	if err != nil {
		return err
	}
	e.scratch = h.naks
	if h.flags&flagAck != 0 {
		e.onAck(now, &h)
	}
	if h.flags&flagData != 0 {
		e.onData(now, &h)
	}
	if h.flags&flagProbe != 0 {
		e.ackNow = true
	}
	e.flush(now)
	return nil
}

// Tick runs the timers; call it at Deadline (calling it earlier is harmless).
func (e *Endpoint) Tick(now time.Time) {
	if !e.nakDue.IsZero() && !now.Before(e.nakDue) {
		// Gaps still open a while after they were reported: the NAK or the repair
		// may have been lost, and a sender blocked on its window sends nothing that
		// would make us speak. Report them again.
		e.nakDue = time.Time{}
		if e.highest >= e.cum && len(e.ooo) > 0 {
			e.ackNow = true
		}
	}
	if !e.wndDue.IsZero() && !now.Before(e.wndDue) {
		e.ackNow = true
		e.wndDue = now.Add(2 * e.renakAfter())
	}
	if !e.rtoAt.IsZero() && !now.Before(e.rtoAt) && len(e.unacked) > 0 {
		// Retransmission timeout: resend the oldest, back off (RFC 6298 5.5), and
		// treat it as a severe congestion signal.
		p := e.unacked[0]
		e.retransmit = append(e.retransmit, p)
		e.lossAt = now
		e.rto = min(2*e.rto, e.cfg.MaxRTO)
		e.ssthresh = max(e.cwnd/2, 4)
		e.cwnd = 4
		e.recovery = e.nextSeq
		e.rtoAt = time.Time{}
	}
	if !e.probeAt.IsZero() && !now.Before(e.probeAt) && len(e.unacked) > 0 && !e.probed {
		// Tail-loss probe: the last packets of a burst may be gone with nothing
		// behind them to reveal the gap; resend the newest and ask for an ack.
		e.probed = true
		e.retransmit = append(e.retransmit, e.unacked[len(e.unacked)-1])
		e.probeAt = time.Time{}
	}
	e.flush(now)
}

// Deadline is when Tick must next be called; zero when no timer is set.
func (e *Endpoint) Deadline() time.Time {
	var d time.Time
	var pace time.Time
	if e.paceWait {
		pace = e.paceAt
	}
	for _, t := range []time.Time{e.rtoAt, e.probeAt, e.ackDue, e.bundleDeadline(), e.nakDue, pace, e.wndDue} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

func (e *Endpoint) bundleDeadline() time.Time {
	if len(e.qlens) == 0 || e.cfg.BundleDelay < 0 || !e.canSend() || e.paceWait {
		return time.Time{} // nothing to wait for, or the windows or pacing decide
	}
	return e.queuedAt.Add(e.cfg.BundleDelay)
}

// Output returns the datagrams to send and the messages delivered since the last
// call. Both stay valid only until the next call of any Endpoint method: the caller
// sends and copies them before that.
func (e *Endpoint) Output() (datagrams, delivered [][]byte) {
	e.outViews = views(e.outViews[:0], e.outBuf, e.outEnds)
	e.delViews = views(e.delViews[:0], e.delBuf, e.delEnds)
	e.outBuf, e.outEnds = e.outBuf[:0], e.outEnds[:0]
	e.delBuf, e.delEnds = e.delBuf[:0], e.delEnds[:0]
	return e.outViews, e.delViews
}

// views cuts buf at ends.
func views(dst [][]byte, buf []byte, ends []int) [][]byte {
	start := 0
	for _, end := range ends {
		dst = append(dst, buf[start:end:end])
		start = end
	}
	return dst
}

// Stats reports the counters.
func (e *Endpoint) Stats() Stats {
	s := e.stats
	s.RTT, s.RTO, s.Cwnd, s.Inflight, s.Queued = e.srtt, e.rto, e.cwnd, len(e.unacked), e.queued
	return s
}

// SetUnread tells the endpoint how many delivered bytes the application has not
// consumed yet. They count against the window it advertises, so that a peer cannot
// fill memory faster than the application reads: at most Window packets' worth is
// held. It reports whether this reopened a closed window, in which case an
// acknowledgement saying so is in Output.
func (e *Endpoint) SetUnread(now time.Time, n int) bool {
	e.unread = n
	if e.advertised*2 >= uint64(e.cfg.Window) || e.window()*2 < uint64(e.cfg.Window) {
		return false
	}
	e.ackNow = true
	e.flush(now)
	// The sender sends nothing into a closed window, so a lost update would stall
	// both sides: repeat it until data arrives.
	e.wndDue = now.Add(2 * e.renakAfter())
	return true
}

// window is how many more packets we take: the buffer less what is held out of
// order and what is delivered but unread.
func (e *Endpoint) window() uint64 {
	return uint64(max(e.cfg.Window-len(e.ooo)-e.unread/e.cfg.MTU, 0))
}

// RecentLoss reports whether packets were lost in the last second.
func (e *Endpoint) RecentLoss(now time.Time) bool {
	return !e.lossAt.IsZero() && now.Sub(e.lossAt) < time.Second
}

// Idle reports whether nothing is queued, in flight or owed to the peer.
func (e *Endpoint) Idle() bool {
	return len(e.qlens) == 0 && len(e.unacked) == 0 && e.ackCount == 0 && !e.ackNow
}

// ---------------------------------------------------------------------------------
// Receiving

func (e *Endpoint) onData(now time.Time, h *header) {
	seq := h.seq
	e.wndDue = time.Time{}
	e.lastArr, e.lastArrAt = seq, now
	switch {
	case seq < e.cum || e.ooo[seq] != nil:
		// A duplicate: our acknowledgement may have been lost; say it again.
		e.stats.Duplicates++
		e.ackNow = true
		return
	case seq >= e.cum+uint64(e.cfg.Window):
		return // beyond what we buffer; the sender will resend
	}
	if t, ok := e.nakSentAt[seq]; ok {
		// A repair: the time since our NAK is how long recovery takes, which is
		// when to report the gap again if it does not arrive.
		if r := now.Sub(t); e.nakRTT == 0 {
			e.nakRTT = r
		} else {
			e.nakRTT = (7*e.nakRTT + r) / 8
		}
		delete(e.nakSentAt, seq)
	}
	e.ackCount++
	if e.ackDue.IsZero() {
		e.ackDue = now.Add(e.cfg.AckDelay)
	}
	if seq != e.cum {
		// While there are gaps, acknowledge often enough that a lost repair is
		// noticed within a round trip or so, not after the ack delay.
		if e.oooCount++; e.oooCount >= oooAckEvery {
			e.ackNow = true
		}
		e.ooo[seq] = append([]byte(nil), h.payload...)
		if seq > e.highest {
			if seq > max(e.highest, e.cum-1)+1 {
				e.ackNow = true // a new gap: report it at once
			}
			e.highest = seq
		}
		return
	}
	if len(e.ooo) > 0 {
		// This fills a hole: the sender waits on it, its window likely full; tell
		// it at once how far we now have everything.
		e.ackNow = true
	}
	e.deliverFrames(h.payload)
	e.cum++
	for {
		f, ok := e.ooo[e.cum]
		if !ok {
			break
		}
		delete(e.ooo, e.cum)
		delete(e.nakSentAt, e.cum)
		e.deliverFrames(f)
		e.cum++
	}
	if e.highest < e.cum {
		e.highest = e.cum - 1
	}
	if e.ackCount >= e.cfg.AckEvery {
		e.ackNow = true
	}
}

func (e *Endpoint) deliverFrames(p []byte) {
	for len(p) > 0 {
		fl := p[0]
		n, k := binary.Uvarint(p[1:])
		data := p[1+k : 1+k+int(n)]
		p = p[1+k+int(n):]
		if fl == framePad {
			continue
		}
		if fl&frameFirst != 0 {
			e.partial = e.partial[:0]
			e.inMsg = true
		}
		switch {
		case !e.inMsg:
			continue // the sender never splits this way; ignore rather than corrupt
		case fl&frameLast == 0:
			e.partial = append(e.partial, data...)
			continue
		case fl&frameFirst != 0:
			e.delBuf = append(e.delBuf, data...) // whole in one frame
		default:
			e.delBuf = append(append(e.delBuf, e.partial...), data...)
		}
		e.delEnds = append(e.delEnds, len(e.delBuf))
		e.stats.Delivered++
		e.inMsg = false
	}
}

// oooAckEvery out-of-order arrivals make an acknowledgement.
const oooAckEvery = 8

// renakAfter is how long a reported gap waits before it is reported again: a
// little over the time repairs take, measured, or over the round trip until then.
func (e *Endpoint) renakAfter() time.Duration {
	base := e.nakRTT
	if base == 0 {
		base = e.srtt
	}
	if base == 0 {
		return 10 * time.Millisecond
	}
	return min(max(base*5/4, time.Millisecond), 250*time.Millisecond)
}

// naks lists the missing ranges below the highest sequence received, skipping those
// reported less than an RTT ago.
func (e *Endpoint) naks(now time.Time, limit int) []nakRange {
	var out []nakRange
	if e.highest < e.cum {
		return nil
	}
	again := e.renakAfter()
	var missing []uint64
	for s := e.cum; s < e.highest && len(missing) < limit*8; s++ {
		if _, ok := e.ooo[s]; ok {
			continue
		}
		if t, ok := e.nakSentAt[s]; ok && now.Sub(t) < again {
			continue
		}
		missing = append(missing, s)
	}
	for _, s := range missing {
		if n := len(out); n > 0 && out[n-1].start+out[n-1].n == s {
			out[n-1].n++
		} else if n == limit {
			e.ackNow = true // the rest go in the next acknowledgement
			break
		} else {
			out = append(out, nakRange{s, 1})
		}
		e.nakSentAt[s] = now
	}
	return out
}

// ---------------------------------------------------------------------------------
// Acknowledgements from the peer

func (e *Endpoint) onAck(now time.Time, h *header) {
	e.peerWnd, e.peerHeld = h.window, h.held
	if h.echo >= e.peerCum && h.echo < e.nextSeq {
		i := sort.Search(len(e.unacked), func(i int) bool { return e.unacked[i].seq >= h.echo })
		if i < len(e.unacked) && e.unacked[i].seq == h.echo && e.unacked[i].retrans == 0 {
			// Karn: never from a retransmitted packet; the peer's hold time is taken out.
			if r := now.Sub(e.unacked[i].sentAt) - time.Duration(h.echoUs)*time.Microsecond; r > 0 {
				e.sampleRTT(now, r)
			}
		}
	}
	if h.cum > e.peerCum && h.cum <= e.nextSeq {
		acked := 0
		for len(e.unacked) > 0 && e.unacked[0].seq < h.cum {
			e.spare = append(e.spare, e.unacked[0])
			e.unacked[0] = nil
			e.unacked = e.unacked[1:]
			acked++
		}
		e.peerCum = h.cum
		if e.peerCum >= e.roundEnd {
			e.endRound()
		}
		e.growWindow(acked)
		e.probed = false
		e.rto = e.baseRTO() // progress ends the timer's backoff
		e.restartTimers(now)
	}
	if len(h.naks) == 0 {
		return
	}
	lost := false
	for _, r := range h.naks {
		for s := r.start; s < r.start+r.n && s < e.nextSeq; s++ {
			i := sort.Search(len(e.unacked), func(i int) bool { return e.unacked[i].seq >= s })
			if i == len(e.unacked) || e.unacked[i].seq != s {
				continue
			}
			p := e.unacked[i]
			if !p.nakAt.IsZero() && now.Sub(p.nakAt) < min(max(e.srtt/2, 500*time.Microsecond), 500*time.Millisecond) {
				continue // already resent for this report
			}
			p.nakAt, e.lossAt = now, now
			e.retransmit = append(e.retransmit, p)
			if p.retrans == 0 && p.seq >= e.roundStart {
				e.roundLost++
			}
			lost = true
		}
	}
	if lost && e.peerCum >= e.recovery && e.queueing() {
		e.cut()
	}
}

// Loss alone is not taken for congestion: on a lossy radio or a path with random
// loss, backing off for every loss starves the flow the way TCP starves there. The
// window is cut, at most once per round trip, when losses come with a queue
// building up (the round trip well above its minimum), and at the end of a round
// that lost over a quarter of its packets. A full drop-tail queue shows both, so
// Tern still yields to other flows there.

// queueing reports whether the latest round trip is well above the minimum.
func (e *Endpoint) queueing() bool {
	return e.minRTT > 0 && e.lastRTT > e.minRTT+max(e.minRTT/4, time.Millisecond)
}

func (e *Endpoint) cut() {
	e.ssthresh = max(e.cwnd*0.7, 8)
	e.cwnd = e.ssthresh
	e.recovery = e.nextSeq
}

const minRoundSample = 32

// endRound closes a measuring round once all its packets are acknowledged, cuts
// the window if the round lost heavily, and starts the next with what is in flight.
func (e *Endpoint) endRound() {
	// Below minRoundSample packets a share says too little: a round of 3 that
	// lost 1 is no sign of congestion on a path with random loss.
	if sent := e.roundEnd - e.roundStart; sent >= minRoundSample && uint64(e.roundLost)*4 > sent && e.peerCum >= e.recovery {
		e.cut()
	}
	e.roundStart, e.roundEnd, e.roundLost = e.roundEnd, e.nextSeq, 0
}

func (e *Endpoint) sampleRTT(now time.Time, r time.Duration) {
	e.lastRTT = r
	if e.minRTT == 0 || r <= e.minRTT || now.Sub(e.minRTTAt) > minRTTWindow {
		e.minRTT, e.minRTTAt = r, now
	}
	if e.srtt == 0 {
		e.srtt, e.rttvar = r, r/2
	} else {
		d := e.srtt - r
		if d < 0 {
			d = -d
		}
		e.rttvar = (3*e.rttvar + d) / 4
		e.srtt = (7*e.srtt + r) / 8
	}
	e.rto = e.baseRTO()
}

// minRTTWindow is how long a minimum round trip stands: a path that changed (a new
// route, a NAT rebinding) gets a new minimum.
const minRTTWindow = 10 * time.Second

// baseRTO is the retransmission timeout of RFC 6298 without backoff.
func (e *Endpoint) baseRTO() time.Duration {
	if e.srtt == 0 {
		return e.cfg.InitialRTO
	}
	return min(max(e.srtt+max(time.Millisecond, 4*e.rttvar), e.cfg.MinRTO), e.cfg.MaxRTO)
}

func (e *Endpoint) growWindow(acked int) {
	if e.cwnd < e.ssthresh && e.queueing() {
		// A queue is building: slow start has found the path's capacity (as
		// HyStart does); grow linearly from here.
		e.ssthresh = e.cwnd
	}
	for range acked {
		if e.cwnd < e.ssthresh {
			e.cwnd++
		} else {
			e.cwnd += 1 / e.cwnd
		}
	}
	e.cwnd = min(e.cwnd, float64(e.cfg.Window))
}

// restartTimers sets the retransmission timer from the oldest unacknowledged packet
// and the tail-loss probe from the last send.
func (e *Endpoint) restartTimers(now time.Time) {
	if len(e.unacked) == 0 {
		e.rtoAt, e.probeAt = time.Time{}, time.Time{}
		return
	}
	e.rtoAt = e.unacked[0].sentAt.Add(e.rto)
	if !e.probed {
		// As QUIC's probe timeout: a round trip, its variation and the time the
		// peer may hold an acknowledgement back.
		pto := e.srtt + max(4*e.rttvar, time.Millisecond) + e.cfg.AckDelay
		if e.srtt == 0 {
			pto = e.rto / 2
		}
		e.probeAt = e.lastSend.Add(max(pto, 10*time.Millisecond))
	}
}

// ---------------------------------------------------------------------------------
// Sending

// flush turns what is due into datagrams: retransmissions, new data within the
// windows, then an acknowledgement if one is owed and no data carried it.
func (e *Endpoint) flush(now time.Time) {
	sentData := false
	for _, p := range e.retransmit {
		if p.seq < e.peerCum {
			continue // acknowledged meanwhile
		}
		e.sendPacket(now, p, true)
		sentData = true
	}
	clear(e.retransmit)
	e.retransmit = e.retransmit[:0]
	e.paceWait = false
	for len(e.qlens) > 0 && e.canSend() {
		if !e.full() && e.cfg.BundleDelay >= 0 && now.Before(e.queuedAt.Add(e.cfg.BundleDelay)) {
			break // wait a little for more to bundle
		}
		if now.Before(e.paceAt) {
			e.paceWait = true
			break
		}
		e.pace(now)
		p := e.newPacket()
		p.frames = e.packetize(p.frames[:0], e.cfg.MTU-e.headerLen(now))
		p.full = len(e.qlens) > 0
		e.nextSeq++
		e.unacked = append(e.unacked, p)
		e.sendPacket(now, p, false)
		sentData = true
		// What is left waits its own bundling delay from now.
		e.queuedAt = now
	}
	if !sentData && (e.ackNow || e.ackCount > 0 && !e.ackDue.IsZero() && !now.Before(e.ackDue)) {
		e.outBuf = e.appendAckSection(now, append(e.outBuf, version|flagAck), maxRanges)
		e.outEnds = append(e.outEnds, len(e.outBuf))
		e.stats.CoordPackets++
	}
	if sentData {
		e.restartTimers(now)
	}
}

// paceBurst packets may leave back to back after a pause.
const paceBurst = 10

// pace spaces new packets evenly over the round trip, at a little more than the
// window's rate (twice it in slow start, as Linux paces TCP), so that a window
// does not leave as one burst that overflows a queue on the way.
func (e *Endpoint) pace(now time.Time) {
	if e.srtt == 0 {
		return
	}
	gain := 1.25
	if e.cwnd < e.ssthresh {
		gain = 2
	}
	interval := time.Duration(float64(e.srtt) / (e.cwnd * gain))
	e.paceAt = maxTime(e.paceAt, now.Add(-paceBurst*interval)).Add(interval)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// canSend reports whether the congestion and receive windows allow a new packet.
func (e *Endpoint) canSend() bool {
	// Packets the peer holds above its cumulative ack have left the network: the
	// congestion window counts only what is still on the way (as TCP's SACK
	// "pipe"), so a hole being repaired does not stall the window for a round trip.
	// The receive window bounds the whole span.
	inflight := uint64(len(e.unacked))
	onTheWay := inflight - min(e.peerHeld, inflight)
	return float64(onTheWay) < e.cwnd && inflight < e.peerWnd+e.peerHeld
}

// full reports whether the queue holds at least a datagram's worth.
func (e *Endpoint) full() bool { return e.queued >= e.cfg.MTU-32 }

// newPacket takes an acknowledged packet for reuse, or makes one.
func (e *Endpoint) newPacket() *sentPacket {
	n := len(e.spare)
	if n == 0 {
		return &sentPacket{seq: e.nextSeq, frames: make([]byte, 0, e.cfg.MTU)}
	}
	p := e.spare[n-1]
	e.spare[n-1] = nil
	e.spare = e.spare[:n-1]
	*p = sentPacket{seq: e.nextSeq, frames: p.frames[:0]}
	return p
}

// headerLen estimates the bytes of a data datagram's header sent now, with room
// for piggyRanges NAK ranges and a small margin: the header of a later
// retransmission may be a little larger, or carry fewer ranges.
func (e *Endpoint) headerLen(now time.Time) int {
	return 1 + uvarintLen(e.nextSeq) + e.ackFixedLen(now) + piggyRanges*maxRangeLen + headerMargin
}

// ackFixedLen is the size of an ack section without NAK ranges, sent now.
func (e *Endpoint) ackFixedLen(now time.Time) int {
	return uvarintLen(e.cum) + uvarintLen(uint64(e.cfg.Window)) + uvarintLen(uint64(len(e.ooo))) +
		uvarintLen(e.lastArr) + uvarintLen(e.echoDelay(now)) + 1
}

// echoDelay is how long, in microseconds, the data packet that arrived last has
// waited for our acknowledgement.
func (e *Endpoint) echoDelay(now time.Time) uint64 {
	if e.lastArrAt.IsZero() {
		return 0
	}
	return uint64(now.Sub(e.lastArrAt) / time.Microsecond)
}

// headerMargin absorbs a retransmission's header growing a little (larger
// sequence numbers, a longer echo delay).
const headerMargin = 4

// packetize appends to b frames from the queue that fit in room bytes.
func (e *Endpoint) packetize(b []byte, room int) []byte {
	for len(e.qlens) > 0 {
		rest := e.qbuf[e.qhead : e.qhead+e.qlens[0]]
		n := min(len(rest), room-1-uvarintLen(uint64(room)))
		if n <= 0 {
			break
		}
		var fl byte
		if e.queueOff == 0 {
			fl |= frameFirst
		}
		if n == len(rest) {
			fl |= frameLast
		}
		b = append(b, fl)
		b = binary.AppendUvarint(b, uint64(n))
		b = append(b, rest[:n]...)
		room -= 1 + uvarintLen(uint64(n)) + n
		e.queued -= n
		e.qhead += n
		if n == len(rest) {
			e.qlens = e.qlens[1:]
			e.queueOff = 0
		} else {
			e.qlens[0] -= n
			e.queueOff += n
		}
	}
	if len(e.qlens) == 0 {
		e.qbuf, e.qhead, e.qlens = e.qbuf[:0], 0, e.qlens[:0]
	}
	return b
}

func (e *Endpoint) sendPacket(now time.Time, p *sentPacket, retrans bool) {
	flags := byte(version | flagData)
	withAck := e.ackCount > 0 || e.ackNow || e.cum > 1
	if withAck {
		flags |= flagAck
	}
	switch {
	case retrans && (e.probed && p == e.unacked[len(e.unacked)-1] || p == e.unacked[0] && e.rtoAt.IsZero()):
		flags |= flagProbe // tail-loss probe or timeout: the peer acknowledges at once
	case !e.canSend():
		// This packet fills our window: nothing more goes out until an ack frees
		// room, so ask for it now rather than after the peer's ack delay. A steady
		// stream that never fills the window keeps its acks few.
		flags |= flagProbe
	}
	b := append(e.outBuf, flags)
	b = binary.AppendUvarint(b, p.seq)
	start := len(e.outBuf)
	if withAck {
		// As many NAK ranges as the datagram has room for; the rest follow.
		fixed := len(b) - start + e.ackFixedLen(now)
		b = e.appendAckSection(now, b, max(0, min(maxRanges, (e.cfg.MTU-len(p.frames)-fixed)/maxRangeLen)))
	}
	b = append(b, p.frames...)
	if pad := e.cfg.MTU - (len(b) - start); p.full && pad >= 2 {
		b = appendPad(b, pad)
	}
	e.outBuf = b
	e.outEnds = append(e.outEnds, len(e.outBuf))
	if retrans {
		p.retrans++
		e.stats.Retransmits++
	} else {
		e.stats.DataPackets++
	}
	p.sentAt = now
	e.lastSend = now
}

// appendAckSection writes our acknowledgement state and resets what it owed.
func (e *Endpoint) appendAckSection(now time.Time, b []byte, limit int) []byte {
	e.ackNow = false // naks sets it again when it could not say everything
	naks := e.naks(now, limit)
	if len(naks) > 0 {
		e.stats.NaksSent++
	}
	if len(e.ooo) > 0 {
		e.nakDue = now.Add(2 * e.renakAfter())
	} else {
		e.nakDue = time.Time{}
	}
	window := e.window()
	e.advertised = window
	b = appendAck(b, e.cum, window, uint64(len(e.ooo)), e.lastArr, e.echoDelay(now), naks)
	e.ackCount, e.oooCount, e.ackDue = 0, 0, time.Time{}
	return b
}
