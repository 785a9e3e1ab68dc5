package outbound

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The flow-control and buffering constants every connection shares
// (docs/operations.md, "Flow control and slow consumers").
const (
	// StallBacklog is the queued bytes past which publishers wait for a connection
	// that is still making progress (at most half its MaxPending): small enough
	// that a saturated subscriber's queueing delay stays in milliseconds.
	StallBacklog = 512 << 10
	// MaxStall bounds how long a publisher waits per read batch for the
	// connections it fed (broker.Batch.WaitStalled).
	MaxStall = 10 * time.Millisecond
	// StuckAfter is how long a writer may make no progress before its connection
	// stops holding publishers back.
	StuckAfter = 250 * time.Millisecond
	// WriteChunk bounds one socket write, so that waiting publishers see progress
	// often.
	WriteChunk = 256 << 10
	// MaxIdleBuffer is the capacity above which a buffer grown by a burst is let
	// go once drained.
	MaxIdleBuffer = 1 << 20
	// WriterIdle is how long a writer with nothing to send waits before it ends:
	// long enough to carry a steady stream without a goroutine start per write,
	// short enough that a storm of connecting devices does not keep one each.
	WriterIdle = 200 * time.Millisecond
	// DefaultLinger is how long a connection the server closed after telling the
	// client why keeps reading and discarding input before it closes.
	DefaultLinger = time.Second
	// lingerMaxBytes bounds what a lingering connection reads and discards.
	lingerMaxBytes = 64 << 20
	// finalWriteTimeout bounds the write of what is still queued when a connection
	// closes.
	finalWriteTimeout = time.Second
	// InlineFlushMax is the most a Flush writes from its caller's goroutine when no
	// writer runs; more goes to a writer goroutine.
	InlineFlushMax = 16 << 10
	// InlineFlushWait bounds how long an inline flush waits for a full socket
	// before it hands the rest to a writer goroutine.
	InlineFlushWait = time.Millisecond
)

// Policy is what happens to a delivery that would take a connection's pending bytes
// over its limit.
type Policy uint8

// Slow-consumer policies.
const (
	PolicyDrop       Policy = iota // drop the message and count it
	PolicyDisconnect               // tell the client and close the connection
)

func (p Policy) String() string {
	if p == PolicyDisconnect {
		return "disconnect"
	}
	return "drop"
}

// ParsePolicy reads a policy by its name, "drop" or "disconnect".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "drop":
		return PolicyDrop, nil
	case "disconnect":
		return PolicyDisconnect, nil
	}
	return 0, fmt.Errorf("slow consumer policy %q: want drop or disconnect", s)
}

// ErrSlowConsumer is the close reason of a connection cut off by PolicyDisconnect.
var ErrSlowConsumer = errors.New("slow consumer")

// Config is what every connection of a front end shares.
type Config struct {
	// MaxPending is the bytes queued for one connection before the slow-consumer
	// policy applies to a delivery.
	MaxPending int64
	Policy     Policy
	// WriteTimeout closes a connection whose socket write blocks this long.
	WriteTimeout time.Duration
	// Linger is how long a connection closed after a goodbye keeps reading and
	// discarding input; 0 means DefaultLinger, negative none.
	Linger time.Duration
	// NotSentLowat, when positive, bounds the bytes a TCP socket may hold unsent
	// (TCP_NOTSENT_LOWAT, Linux): writes past it wait, so a subscriber's backlog
	// stays in its queue, where flow control sees it, rather than in a kernel send
	// buffer that autotunes to megabytes. Bytes in flight are not limited, so
	// throughput on long links is not either.
	NotSentLowat int
}

// Endpoint is the protocol's side of a Queue.
type Endpoint interface {
	// Socket returns the socket to write to, or an error if the connection has
	// none any more. The queue calls it without holding its lock.
	Socket() (net.Conn, error)
	// StopReading tells the protocol the queue was closed, so that its reader
	// stops (a read deadline in the past, a parked reader woken). Called once,
	// without the queue's lock.
	StopReading()
	// AppendSlowGoodbye appends what tells the client it is cut off as a slow
	// consumer (it may append nothing). Called with the queue's lock held.
	AppendSlowGoodbye(b []byte, pending, limit int64) []byte
}

// WriterStopper is implemented by endpoints that want to know when the writer ends
// for idleness (an idle MQTT connection then gives up its socket).
type WriterStopper interface {
	WriterStopped()
}

// InlineGate is implemented by endpoints that sometimes want their output written
// by a writer goroutine rather than inline by Flush's caller (an idle MQTT
// connection, whose writer's idle end is when it gives up its socket).
type InlineGate interface {
	InlineFlush() bool
}

// connIDs numbers connections across every front end of the process.
var connIDs atomic.Uint64

// NextConnID returns a connection id no other connection of this process has had,
// whatever its protocol: /connections lists them all by id.
func NextConnID() uint64 { return connIDs.Add(1) }

// Counters are what a connection has queued and dropped.
type Counters struct {
	OutMsgs, OutBytes uint64 // messages (Commit) and their payload bytes
	Dropped           uint64 // deliveries refused as a slow consumer
	Slow              bool   // the connection hit its pending limit at least once
}

// Group is what the connections of one front end share: the configuration, the
// slow-consumer count, and the counters of connections that have gone.
type Group struct {
	cfg     Config
	stallAt int64
	log     *slog.Logger

	slowConsumers                    atomic.Uint64
	goneMsgs, goneBytes, goneDropped atomic.Uint64
	goneIn, goneInBytes              atomic.Uint64
	opened                           atomic.Uint64
}

// NewGroup validates cfg and returns a group whose queues log through log.
func NewGroup(cfg Config, log *slog.Logger) (*Group, error) {
	switch {
	case cfg.MaxPending <= 0:
		return nil, fmt.Errorf("max pending must be positive, got %d", cfg.MaxPending)
	case cfg.WriteTimeout <= 0:
		return nil, fmt.Errorf("write timeout must be positive, got %v", cfg.WriteTimeout)
	case cfg.Policy != PolicyDrop && cfg.Policy != PolicyDisconnect:
		return nil, fmt.Errorf("slow consumer policy %d unknown", cfg.Policy)
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{cfg: cfg, stallAt: min(cfg.MaxPending/2, StallBacklog), log: log}, nil
}

// Opened counts a connection accepted (Totals.TotalConnections) and tunes its
// socket for the group's queues.
func (g *Group) Opened(nc net.Conn) {
	g.opened.Add(1)
	if g.cfg.NotSentLowat > 0 {
		if err := setNotSentLowat(nc, g.cfg.NotSentLowat); err != nil {
			g.log.Debug("socket option TCP_NOTSENT_LOWAT", "err", err)
		}
	}
}

// Retire adds the counters of a connection that has gone — what its queue sent and
// dropped, and the messages and payload bytes its reader received — to the group's
// totals. The front end calls it as it forgets the connection, under the same lock
// its Stats takes, so that totals never count a connection twice or not at all.
func (g *Group) Retire(q *Queue, inMsgs, inBytes uint64) {
	c := q.Counters()
	g.goneMsgs.Add(c.OutMsgs)
	g.goneBytes.Add(c.OutBytes)
	g.goneDropped.Add(c.Dropped)
	g.goneIn.Add(inMsgs)
	g.goneInBytes.Add(inBytes)
}

// Totals are the counters of a group's connections, live and gone.
type Totals struct {
	Connections       int
	TotalConnections  uint64
	InMsgs, InBytes   uint64
	OutMsgs, OutBytes uint64
	SlowConsumers     uint64
	Dropped           uint64
}

// AddGone adds the group's gone connections and connection counts to t.
func (g *Group) AddGone(t *Totals) {
	t.TotalConnections += g.opened.Load()
	t.SlowConsumers += g.slowConsumers.Load()
	t.InMsgs += g.goneIn.Load()
	t.InBytes += g.goneInBytes.Load()
	t.OutMsgs += g.goneMsgs.Load()
	t.OutBytes += g.goneBytes.Load()
	t.Dropped += g.goneDropped.Load()
}

// AddLive adds one live connection, its queue q and its reader's counters, to t.
func (t *Totals) AddLive(q *Queue, inMsgs, inBytes uint64) {
	c := q.Counters()
	t.Connections++
	t.InMsgs += inMsgs
	t.InBytes += inBytes
	t.OutMsgs += c.OutMsgs
	t.OutBytes += c.OutBytes
	t.Dropped += c.Dropped
}

// state is a queue's buffer and flow-control state. It exists while there is
// something to send or a writer runs; an idle queue lets it go (Release).
type state struct {
	out []byte
	// skip is how many bytes at the start of out are not to be sent: the head
	// room before a frame handed over whole (Hand). 0 otherwise.
	skip     int
	spare    []byte        // the buffer the writer handed back, for the next take
	writing  int           // bytes the writer has taken and not yet sent
	stallCh  chan struct{} // closed at the writer's next progress; nil when not stalling
	stuck    bool          // no progress for StuckAfter: no stalls until drained
	lastProg int64         // unix nanoseconds of the writer's latest progress
	wake     chan struct{} // Flush's signal to a running writer

	// Once the queue is closed (a closed queue keeps its state).
	reason      error
	told        bool          // closed after a goodbye: Finish lingers
	writeFailed bool          // the socket failed: nothing more is sent
	exited      chan struct{} // Finish waits on it for the writer role to be let go
}

var states = sync.Pool{New: func() any { return &state{wake: make(chan struct{}, 1)} }}

// Queue is one connection's outbound buffer and writer. The zero value is unusable:
// call Init first. A Queue must not be copied after Init. It is kept small (56
// bytes), since idle MQTT devices are many: what a queue needs only while it has
// something to send, or once it is closed, lives in its state.
type Queue struct {
	mu  sync.Mutex
	st  atomic.Pointer[state] // set under mu
	g   *Group
	ep  Endpoint
	ctr *Counters // under mu; made on the first delivery or drop
	// writerOn is the writer role: 1 while a writer goroutine runs or Flush writes
	// inline. Whoever takes it (CAS 0 → 1) is the only one writing to the socket,
	// and lets it go with releaseRole.
	writerOn atomic.Int32
	// closed is set under mu, once; Closed and SetReaderDeadline read it
	// without mu, as a reader does before each read.
	closed atomic.Bool
}

// Init prepares q for the connection ep of group g.
func (q *Queue) Init(g *Group, ep Endpoint) {
	q.g, q.ep = g, ep
}

// stateLocked returns q's state, making it if needed. q.mu is held.
func (q *Queue) stateLocked() *state {
	st := q.st.Load()
	if st == nil {
		st = states.Get().(*state)
		q.st.Store(st)
	}
	return st
}

// Begin locks the queue for appending a control frame or a message that must not be
// refused (one a protocol session already counts as in flight) and returns the
// buffer to append to. If the queue is closed it returns false and holds no lock;
// otherwise the caller hands the buffer back with End, Commit or Cancel.
func (q *Queue) Begin() ([]byte, bool) {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return nil, false
	}
	return q.stateLocked().out, true
}

// Reserve is Begin for a delivery of about size bytes that the slow-consumer policy
// may refuse: over the pending limit it applies the policy and returns false,
// holding no lock.
func (q *Queue) Reserve(size int) ([]byte, bool) {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return nil, false
	}
	st := q.stateLocked()
	if pending := int64(st.queued() + st.writing + size); pending > q.g.cfg.MaxPending {
		q.overflowLocked(st, pending)
		return nil, false
	}
	if size > cap(st.out)-len(st.out) {
		// Doubling, where append grows a large buffer by a quarter: a burst
		// queued into an empty buffer copies its bytes about once, not four
		// times over.
		st.out = slices.Grow(st.out, max(size, cap(st.out)))
	}
	return st.out, true
}

// End stores b, the buffer Begin or Reserve returned with frames appended, and
// unlocks. It does not wake the writer: call Flush once per batch.
func (q *Queue) End(b []byte) {
	q.storeLocked(b)
	q.mu.Unlock()
}

// Commit is End for a message delivery: it counts one message of payload bytes.
func (q *Queue) Commit(b []byte, payload int) {
	c := q.countersLocked()
	c.OutMsgs++
	c.OutBytes += uint64(payload)
	q.storeLocked(b)
	q.mu.Unlock()
}

// countersLocked returns q's counters, making them if needed. q.mu is held.
func (q *Queue) countersLocked() *Counters {
	if q.ctr == nil {
		q.ctr = new(Counters)
	}
	return q.ctr
}

// Cancel unlocks after Begin or Reserve without changing the queue.
func (q *Queue) Cancel() { q.mu.Unlock() }

// CountDropped counts a delivery the protocol itself refused (too large for the
// client, expired) after Begin or Reserve, and unlocks.
func (q *Queue) CountDropped() {
	q.countersLocked().Dropped++
	q.mu.Unlock()
}

func (q *Queue) storeLocked(b []byte) {
	st := q.st.Load() // made by Begin or Reserve
	st.out = b
	if pending := int64(st.queued() + st.writing); pending > q.g.stallAt && !st.stuck && st.stallCh == nil {
		st.stallCh = make(chan struct{})
	}
}

// queued is how many bytes of out are to be sent.
func (st *state) queued() int { return len(st.out) - st.skip }

// Hand queues buf[skip:], a large frame (or frames) the caller built in a buffer
// of its own, without copying it, when nothing else is queued: the queue owns buf
// from then on, and back is an empty buffer the caller may build its next frame
// in (the larger of the queue's two, so that buffers go round instead of being
// grown anew). The skipped head room lets a caller that filled buf from a fixed
// offset put a frame header of a size it learned later just before. With
// something queued, or the queue closed, it queues nothing and reports false, and
// buf stays the caller's: append buf[skip:] then (Append). Like End, it does not
// wake the writer.
func (q *Queue) Hand(buf []byte, skip int) (back []byte, ok bool) {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return nil, false
	}
	st := q.stateLocked()
	if len(st.out) > 0 {
		q.mu.Unlock()
		return nil, false
	}
	back = st.out[:0]
	if cap(st.spare) > cap(back) {
		back, st.spare = st.spare[:0], back
	}
	q.storeLocked(buf)
	st.skip = skip
	q.mu.Unlock()
	return back, true
}

// Append queues the frames appendFrames appends, unless the queue is closed, and
// reports whether it did. It does not wake the writer.
func (q *Queue) Append(appendFrames func([]byte) []byte) bool {
	b, ok := q.Begin()
	if !ok {
		return false
	}
	q.End(appendFrames(b))
	return true
}

// overflowLocked applies the slow-consumer policy to a delivery that would take the
// pending bytes to pending. q.mu is held; it is released.
func (q *Queue) overflowLocked(st *state, pending int64) {
	c := q.countersLocked()
	c.Dropped++
	first := !c.Slow
	c.Slow = true
	limit := q.g.cfg.MaxPending
	disconnect := q.g.cfg.Policy == PolicyDisconnect
	if disconnect {
		// Goes out after what is already queued; nothing is queued after it.
		st.out = q.ep.AppendSlowGoodbye(st.out, pending, limit)
	}
	q.mu.Unlock()
	if first {
		q.g.slowConsumers.Add(1)
		q.g.log.Warn("slow consumer", "pending_bytes", pending, "limit", limit, "policy", q.g.cfg.Policy.String())
	}
	if disconnect {
		q.CloseAfterGoodbye(fmt.Errorf("%w: %d pending bytes over the %d byte limit", ErrSlowConsumer, pending, limit))
	}
}

// Flush gets what is queued moving. With a writer running it only wakes it. With
// none, a little (at most InlineFlushMax bytes) is written from the calling
// goroutine, as NATS's readers flush their subscribers: one goroutine hand-off less
// per message on a request/reply round trip or a lightly loaded subscriber. The
// inline write waits at most InlineFlushWait for the socket; what it could not
// write, and anything larger, goes to a writer goroutine started for it. Flush
// never blocks longer than that.
func (q *Queue) Flush() {
	if st := q.st.Load(); st != nil {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
	for q.writerOn.CompareAndSwap(0, 1) {
		q.mu.Lock()
		st := q.st.Load()
		if q.closed.Load() { // Finish sends the rest itself
			q.releaseRoleLocked()
			q.mu.Unlock()
			return
		}
		if st == nil || st.queued() == 0 { // nothing to send: no writer needed
			q.releaseRoleLocked()
			q.mu.Unlock()
			return
		}
		if st.queued() > InlineFlushMax || !q.inlineAllowed() {
			q.mu.Unlock()
			go q.writeLoop(nil, nil)
			return
		}
		buf, data := q.takeLocked(st)
		q.mu.Unlock()
		if !q.flushInline(st, buf, data) {
			return // a writer goroutine carries on, or the queue failed
		}
		// Done: let the role go, then look again, because a producer that queued
		// meanwhile found the role taken and left its data to us.
		q.releaseRole()
		if q.Pending() == 0 {
			return
		}
	}
}

// releaseRole lets the writer role go and wakes a Finish waiting for it.
func (q *Queue) releaseRole() {
	q.mu.Lock()
	q.releaseRoleLocked()
	q.mu.Unlock()
}

func (q *Queue) releaseRoleLocked() {
	q.writerOn.Store(0)
	if st := q.st.Load(); st != nil && st.exited != nil {
		close(st.exited)
		st.exited = nil
	}
}

// inlineAllowed asks an InlineGate endpoint whether Flush may write inline now.
func (q *Queue) inlineAllowed() bool {
	g, ok := q.ep.(InlineGate)
	return !ok || g.InlineFlush()
}

// takeLocked hands the queued bytes to the writer and gives producers the spare
// buffer: data is what to send, buf the buffer it lies in, for wrote. q.mu is
// held.
func (q *Queue) takeLocked(st *state) (buf, data []byte) {
	buf, data = st.out, st.out[st.skip:]
	st.out, st.skip = st.spare[:0], 0
	st.spare = nil
	st.writing = len(data)
	st.lastProg = time.Now().UnixNano()
	return buf, data
}

// flushInline writes data (in buf), taken by the caller holding the writer role,
// from the calling goroutine and reports whether it is done; if not, a writer
// goroutine it started goes on with the rest and holds the role.
func (q *Queue) flushInline(st *state, buf, data []byte) bool {
	nc, err := q.ep.Socket()
	if err == nil && !resumesAfterTimeout(nc) {
		// A write that times out would break the connection (TLS): the writer
		// goroutine, bound only by the write timeout, sends it all.
		go q.writeLoop(buf, data)
		return false
	}
	n := 0
	if err == nil {
		_ = nc.SetWriteDeadline(time.Now().Add(InlineFlushWait))
		n, err = nc.Write(data)
	}
	var ne net.Error
	switch {
	case err == nil:
		q.wrote(st, buf)
		return true
	case errors.As(err, &ne) && ne.Timeout():
		q.mu.Lock()
		st.writing = len(data) - n
		if n > 0 {
			q.progressLocked(st)
		}
		q.mu.Unlock()
		go q.writeLoop(buf, data[n:])
		return false
	default:
		q.stop(fmt.Errorf("write: %w", err))
		return false
	}
}

// resumesAfterTimeout reports whether a write to nc that times out may be
// followed by another: not so on a TLS connection, whose state a timed-out write
// leaves corrupt (crypto/tls: every later write fails), nor on one that says a
// timeout breaks it (TimeoutBreaksWrites: a WebSocket closes), so that the
// inline flush's short deadline must not be used on them.
func resumesAfterTimeout(nc net.Conn) bool {
	if f, ok := nc.(interface{ TimeoutBreaksWrites() bool }); ok && f.TimeoutBreaksWrites() {
		return false
	}
	_, isTLS := nc.(interface{ ConnectionState() tls.ConnectionState })
	return !isTLS
}

// Stall implements broker.Staller: a channel closed at the writer's next progress,
// nil when publishers need not wait.
func (q *Queue) Stall() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.st.Load(); st != nil && st.stallCh != nil {
		return st.stallCh
	}
	return nil
}

// Stuck implements broker.Staller: a publisher waited in vain. The queue stops
// holding publishers back only once its writer has made no progress for StuckAfter;
// one merely slower than its publishers keeps throttling them.
func (q *Queue) Stuck() {
	q.mu.Lock()
	if st := q.st.Load(); st != nil && st.writing > 0 && time.Since(time.Unix(0, st.lastProg)) > StuckAfter {
		st.stuck = true
		if st.stallCh != nil { // nobody waits for it again until it has drained
			close(st.stallCh)
			st.stallCh = nil
		}
	}
	q.mu.Unlock()
}

// progressLocked releases publishers waiting for this queue. q.mu is held.
func (q *Queue) progressLocked(st *state) {
	st.lastProg = time.Now().UnixNano()
	if st.stallCh != nil {
		close(st.stallCh)
		st.stallCh = nil
	}
	if int64(st.queued()+st.writing) <= q.g.stallAt/2 {
		st.stuck = false
	}
}

// writeLoop sends what is queued until the queue closes or nothing has been queued
// for WriterIdle. It looks before it waits: whoever started it may have queued
// before there was a state to signal. It first sends carry, the rest of buf that an
// inline flush could not write.
func (q *Queue) writeLoop(buf, carry []byte) {
	if buf != nil {
		st := q.st.Load() // kept: st.writing counts carry
		if err := q.write(st, carry); err != nil {
			q.stop(err)
			return
		}
		q.wrote(st, buf)
	}
	idle := time.NewTimer(WriterIdle)
	defer idle.Stop()
	for {
		q.mu.Lock()
		if q.closed.Load() { // Finish sends the rest
			q.releaseRoleLocked()
			q.mu.Unlock()
			return
		}
		st := q.stateLocked()
		if len(st.out) == 0 {
			q.mu.Unlock()
			select {
			case <-st.wake:
				continue
			case <-idle.C:
			}
			// End, unless a Flush came in meanwhile; a Flush after the role
			// is let go starts a new writer itself.
			q.releaseRole()
			if len(st.wake) == 0 || !q.writerOn.CompareAndSwap(0, 1) {
				if ws, ok := q.ep.(WriterStopper); ok {
					ws.WriterStopped()
				}
				return
			}
			idle.Reset(WriterIdle)
			continue
		}
		buf, data := q.takeLocked(st)
		q.mu.Unlock()
		if err := q.write(st, data); err != nil {
			q.stop(err)
			return
		}
		q.wrote(st, buf)
		idle.Reset(WriterIdle)
	}
}

// wrote notes that the writer sent all it had taken, and keeps buf as the spare
// buffer unless a burst grew it past MaxIdleBuffer and is over: neither what buf
// carried nor what has been queued since fills a quarter of it. While a steady
// flow (a replay) keeps both buffers busy they stay, or each round would grow a
// new buffer from nothing, copying its contents at every growth.
func (q *Queue) wrote(st *state, buf []byte) {
	q.mu.Lock()
	st.writing = 0
	q.progressLocked(st)
	if c := cap(buf); c > MaxIdleBuffer && len(buf) < c/4 && len(st.out) < c/4 {
		buf = nil // let a burst's buffer go
	}
	st.spare = buf[:0]
	q.mu.Unlock()
}

// stop ends the writer role after the socket failed.
func (q *Queue) stop(err error) {
	q.fail(err)
	q.releaseRole()
}

// write sends data in chunks of at most WriteChunk, noting progress after each.
func (q *Queue) write(st *state, data []byte) error {
	nc, err := q.ep.Socket()
	if err != nil {
		return err
	}
	timeout := q.g.cfg.WriteTimeout
	for rest := data; len(rest) > 0; {
		chunk := rest[:min(len(rest), WriteChunk)]
		rest = rest[len(chunk):]
		_ = nc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := nc.Write(chunk); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if len(rest) > 0 {
			q.mu.Lock()
			st.writing = len(rest)
			q.progressLocked(st)
			q.mu.Unlock()
		}
	}
	return nil
}

// fail closes the queue after its socket failed: nothing more is sent.
func (q *Queue) fail(err error) {
	q.mu.Lock()
	st := q.stateLocked()
	st.writeFailed = true
	st.writing = 0
	st.out, st.skip = nil, 0
	q.mu.Unlock()
	q.Close(err)
}

// Release lets an idle queue's state go, so that an idle connection holds no
// buffers, and reports whether the queue is now empty of state: false while a
// writer runs or anything is queued. When it lets go it calls dropScratch, if not
// nil, under the queue's lock, so the endpoint can let go of encoding scratch the
// lock guards.
func (q *Queue) Release(dropScratch func()) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.st.Load()
	if st == nil {
		return true
	}
	if q.closed.Load() || q.writerOn.Load() != 0 || len(st.out) > 0 || st.writing > 0 || st.stallCh != nil {
		return false
	}
	q.st.Store(nil)
	if dropScratch != nil {
		dropScratch()
	}
	// Field by field: wake stays, and a late Flush may be reading it.
	st.out, st.skip, st.spare, st.writing, st.stallCh, st.stuck, st.lastProg = releasable(st.out), 0, nil, 0, nil, false, 0
	select {
	case <-st.wake:
	default:
	}
	states.Put(st)
	return true
}

func releasable(b []byte) []byte {
	if cap(b) > 1024 {
		return nil
	}
	return b[:0]
}

// WriterRunning reports whether a writer goroutine runs now.
func (q *Queue) WriterRunning() bool { return q.writerOn.Load() != 0 }

// Close marks the queue closed with reason and tells the endpoint, once; it reports
// whether this call closed it. What is queued is sent by Finish. Safe from any
// goroutine, any number of times.
func (q *Queue) Close(reason error) bool { return q.close(reason, false) }

// CloseAfterGoodbye is Close for a connection the server ends after queueing a frame
// that tells the client why: Finish sends it, then lingers so the client reads it.
func (q *Queue) CloseAfterGoodbye(reason error) bool { return q.close(reason, true) }

func (q *Queue) close(reason error, told bool) bool {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return false
	}
	q.closed.Store(true)
	st := q.stateLocked()
	st.told, st.reason = told, reason
	if st.stallCh != nil {
		close(st.stallCh) // nobody waits for a closed connection
		st.stallCh = nil
	}
	q.mu.Unlock()
	select {
	case st.wake <- struct{}{}: // a writer waiting sees closed and ends
	default:
	}
	q.ep.StopReading()
	return true
}

// Closed reports whether the queue has been closed.
func (q *Queue) Closed() bool { return q.closed.Load() }

// SetReaderDeadline sets the read deadline of nc, the connection's socket, to t
// (zero: none), as its reader does before it reads, unless the queue is closed:
// then to now. A close marks the queue closed before it calls the endpoint's
// StopReading, so a deadline the reader sets after StopReading's is replaced by
// one that ends the read at once, and one it sets before is replaced by
// StopReading's: a reader's deadline never undoes a close.
func (q *Queue) SetReaderDeadline(nc net.Conn, t time.Time) {
	_ = nc.SetReadDeadline(t)
	if q.closed.Load() {
		_ = nc.SetReadDeadline(time.Now())
	}
}

// Reason is why the queue was closed, nil while it is open.
func (q *Queue) Reason() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.st.Load(); st != nil {
		return st.reason
	}
	return nil
}

// Pending is how many bytes wait for the socket.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.st.Load(); st != nil {
		return st.queued() + st.writing
	}
	return 0
}

// WriteBlockedSince reports whether the writer holds bytes it took for the socket
// and has sent none of them since the time it returns: the peer is not reading,
// or this process has not run. Bytes merely queued, with no write under way, are
// not blocked.
func (q *Queue) WriteBlockedSince() (since time.Time, blocked bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if st := q.st.Load(); st != nil && st.writing > 0 {
		return time.Unix(0, st.lastProg), true
	}
	return time.Time{}, false
}

// Counters returns what the queue has queued and dropped.
func (q *Queue) Counters() Counters {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ctr == nil {
		return Counters{}
	}
	return *q.ctr
}

// Finish ends the connection's output once its reader has stopped and the queue is
// closed (it closes it if not): it waits for the writer, sends what is still queued,
// lingers after a goodbye, and closes the socket. Call it once.
func (q *Queue) Finish() {
	q.Close(net.ErrClosed)
	q.mu.Lock()
	st := q.stateLocked()
	var exited chan struct{}
	if q.writerOn.Load() != 0 { // a writer, or an inline flush, is still at it
		exited = make(chan struct{})
		st.exited = exited
	}
	q.mu.Unlock()
	if exited != nil {
		<-exited
	}
	// No writer can start now: the queue is closed.
	q.mu.Lock()
	rest := st.out[st.skip:]
	st.out, st.skip = nil, 0
	failed, told := st.writeFailed, st.told
	q.mu.Unlock()
	nc, err := q.ep.Socket()
	if err != nil || nc == nil {
		return
	}
	if !failed {
		if len(rest) > 0 {
			_ = nc.SetWriteDeadline(time.Now().Add(min(finalWriteTimeout, q.g.cfg.WriteTimeout)))
			_, err = nc.Write(rest)
		}
		if err == nil && told && q.g.cfg.Linger > 0 {
			linger(nc, q.g.cfg.Linger)
		}
	}
	_ = nc.Close()
}

// linger shuts down the write side of nc and reads and discards what the client
// still sends, until it closes, d passes, or lingerMaxBytes were read: closing a
// socket with unread input makes the kernel reset the connection, and a client
// still sending would lose the reason it was given.
func linger(nc net.Conn, d time.Duration) {
	cw, ok := nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(d))
	var buf [4 << 10]byte
	for n := 0; n < lingerMaxBytes; {
		k, err := nc.Read(buf[:])
		n += k
		if err != nil {
			return
		}
	}
}
