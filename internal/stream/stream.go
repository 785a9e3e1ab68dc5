package stream

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Stream is one durable stream: its partitions' logs, the subscriptions that capture
// its subjects, and its consumers.
type Stream struct {
	m    *Manager
	name string
	// acct is the stream's account, "" for the global one; prefix is what the
	// account's subjects start with inside the server ("" for the global one);
	// key is the stream's key in the manager (Key).
	acct    string
	prefix  string
	key     string
	dir     string
	created time.Time
	// group is the Raft group the cluster placed the stream (its partition 0)
	// in, 0 for a stream of this node alone; groups has every partition's, when
	// there are more than one.
	group  uint64
	groups []uint64
	// retention cannot change after creation, so it is read without a lock.
	retention streamapi.Retention
	parts     []*store.Log
	corrupt   []string
	// damagedFrom is, per partition, the first sequence recovery found damaged
	// (0: none); a replica of a replicated stream gets it back from the others
	// (OpenReplica).
	damagedFrom []uint64
	compacted   [][2]uint64 // per partition, the compaction bounds the leader last proposed (writer only)

	cfgMu sync.RWMutex
	cfg   streamapi.StreamConfig
	subs  []capture

	// Captured messages waiting for the writer.
	qmu sync.Mutex
	// next is the stream that took over this one's subscriptions and queue
	// (handOver): everything captured through them goes there. Set under qmu.
	next atomic.Pointer[Stream]
	q    inbound
	// spares are written batches' buffers, emptied, for the queue to take
	// next: up to two, so that one is at hand while a replicated batch waits
	// for its commit in s.cur and the batch before it is being recycled, and a
	// burst's queue does not grow a buffer from nothing.
	spares []inbound
	// A publisher's group (DeliverGroup) writes straight into q while no other
	// group does (groupOpen): other messages wait in held meanwhile, and go in
	// behind it at its end. A group that comes while one is open is staged in
	// one of stages and copied in at its end.
	groupOpen bool
	ticket    groupTicket
	held      inbound
	stages    []*inbound
	deletes   []partSeq // acked work-queue messages to remove
	spareDel  []partSeq
	delSeqs   []uint64  // the writer's scratch for applyDeletes
	interest  []partSeq // messages acked by one consumer of an interest stream
	stallCh   chan struct{}
	maxSize   atomic.Int64 // the configuration's MaxMsgSize, read by Deliver
	kick      chan struct{}
	cleaned   chan struct{} // a segment rewrite beside the writer is done (compact.go)
	ops       chan writerOp
	done      chan struct{}
	stopped   chan struct{}
	started   bool

	// role is held by whoever does the writer's work: the writer goroutine, or
	// a publisher's goroutine proposing a replicated batch itself while the
	// writer is idle (writeInline), so the logs have one writer at a time.
	role sync.Mutex

	// Owned by the writer (whoever holds role).
	writerLive bool    // the writer goroutine runs: inline passes may start
	cur        inbound // the batch being written
	inPass     bool    // cur was proposed inline; the writer waits for its commit
	batch      broker.Batch
	acks       []pendingAck
	ackBuf     []byte
	touched    []bool
	dedup      *dedupWindow

	cmu       sync.RWMutex
	consumers map[string]*Consumer
	// appendWatch wakes readers by position (partition_read.go) after commits.
	appendWatch appendWatchers

	// repl is set on a replica of a replicated stream (replicated.go).
	repl *streamRepl
}

// capture is a subscription that captures one of the stream's subjects, or
// another account's subject it imports under that one.
type capture struct {
	filter string // the stream's subject
	sub    *broker.Subscription
}

type partSeq struct {
	part int
	seq  uint64
}

// inbound is a batch of captured messages packed into one buffer.
type inbound struct {
	buf   []byte
	items []inItem
}

type inItem struct {
	subj, reply, hdr, data span
	tooBig                 bool
	acker                  broker.Acker // broker.Message.Acker, with its tag
	ackTag                 uint64
}

type span struct{ off, n int }

func (q *inbound) put(b []byte) span {
	s := span{len(q.buf), len(b)}
	q.buf = append(q.buf, b...)
	return s
}

func (q *inbound) get(s span) []byte { return q.buf[s.off : s.off+s.n : s.off+s.n] }

// add copies m in as an item; a payload over maxSize is left out and marked.
func (q *inbound) add(m *broker.Message, maxSize int64) {
	it := inItem{acker: m.Acker, ackTag: m.AckTag}
	it.subj = q.put(m.Subject)
	if m.Acker == nil {
		it.reply = q.put(m.Reply)
	}
	it.hdr = q.put(m.Header)
	if int64(len(m.Payload)) > maxSize {
		it.tooBig = true
	} else {
		it.data = q.put(m.Payload)
	}
	q.items = append(q.items, it)
}

// appendAll appends g's items after q's.
func (q *inbound) appendAll(g *inbound) {
	base, from := len(q.buf), len(q.items)
	q.buf = append(q.buf, g.buf...)
	q.items = append(q.items, g.items...)
	if base == 0 {
		return
	}
	for i := from; i < len(q.items); i++ {
		it := &q.items[i]
		it.subj.off += base
		it.reply.off += base
		it.hdr.off += base
		it.data.off += base
	}
}

func (q *inbound) reset() {
	q.buf = q.buf[:0]
	q.items = q.items[:0]
}

// pendingAck is a publish answer the writer sends after its commit.
type pendingAck struct {
	reply  span
	acker  broker.Acker // answered in process instead of on reply
	ackTag uint64
	part   int
	seq    uint64
	dup    bool
	code   int
	err    string
	msgID  msgID
}

func openStream(m *Manager, def streamDef, dir string) (*Stream, error) {
	cfg := def.Config
	s := &Stream{
		m: m, name: cfg.Name, acct: def.Account, prefix: SubjectPrefix(def.Account), key: Key(def.Account, cfg.Name), dir: dir, created: def.Created, group: def.Group, groups: def.Groups, cfg: cfg, retention: cfg.Retention,
		kick: make(chan struct{}, 1), ops: make(chan writerOp), done: make(chan struct{}), stopped: make(chan struct{}),
		cleaned:     make(chan struct{}, 1),
		spares:      make([]inbound, 0, 2),
		consumers:   make(map[string]*Consumer),
		touched:     make([]bool, cfg.Partitions),
		damagedFrom: make([]uint64, cfg.Partitions),
	}
	for i := 0; i < cfg.Partitions; i++ {
		lc := s.logConfig(i)
		l, rep, err := store.Open(lc)
		if err != nil {
			s.closeLogs()
			return nil, fmt.Errorf("stream %q: partition %d: %w", cfg.Name, i, err)
		}
		if rep.TruncatedBytes > 0 {
			m.log.Warn("stream log had a torn tail, truncated", "stream", cfg.Name, "partition", i, "bytes", rep.TruncatedBytes)
		}
		for _, c := range rep.Corrupt {
			s.corrupt = append(s.corrupt, c.Error())
			if c.FirstSeq > 0 && (s.damagedFrom[i] == 0 || c.FirstSeq < s.damagedFrom[i]) {
				s.damagedFrom[i] = c.FirstSeq
			}
		}
		s.parts = append(s.parts, l)
	}
	s.maxSize.Store(int64(cfg.MaxMsgSize))
	s.dedup = newDedupWindow(time.Duration(cfg.DuplicateWindow))
	s.rebuildDedup()
	if err := s.openConsumers(); err != nil {
		s.closeLogs()
		return nil, err
	}
	return s, nil
}

func (s *Stream) logConfig(part int) store.Config {
	cfg := s.cfg
	lc := store.Config{
		Dir:          filepath.Join(s.dir, "p"+strconv.Itoa(part)),
		Name:         s.name,
		SegmentBytes: s.m.cfg.SegmentBytes,
		Sync:         s.m.cfg.Sync,
		SyncInterval: s.m.cfg.SyncInterval,
		MaxAge:       time.Duration(cfg.MaxAge),
		MaxBytes:     cfg.MaxBytes,
		MaxMsgs:      cfg.MaxMsgs,
	}
	if cfg.Partitions > 1 {
		lc.Name = s.name + "/" + strconv.Itoa(part)
		// Limits apply to the stream as a whole; each partition gets its share.
		if lc.MaxBytes > 0 {
			lc.MaxBytes = max(1, lc.MaxBytes/int64(cfg.Partitions))
		}
		if lc.MaxMsgs > 0 {
			lc.MaxMsgs = max(1, lc.MaxMsgs/uint64(cfg.Partitions))
		}
	}
	if cfg.SegmentBytes > 0 {
		lc.SegmentBytes = cfg.SegmentBytes
	}
	if cfg.Sync != "" {
		lc.Sync, _ = store.ParseSyncPolicy(cfg.Sync)
	}
	if cfg.Discard == "new" {
		lc.Discard = store.DiscardNew
	}
	lc.Compression = s.compression()
	lc.SegmentAge = time.Duration(cfg.SegmentAge)
	if c := cfg.Compaction(); c != nil {
		lc.Keys = compactionKey
		lag := time.Duration(c.MaxLag)
		if lag == 0 {
			lag = streamapi.DefaultMaxLag
		}
		if lc.SegmentAge == 0 || lag < lc.SegmentAge {
			lc.SegmentAge = lag
		}
	}
	return lc
}

// compression is the store's form of the configuration's compression (checked
// by normalise).
func (s *Stream) compression() store.Compression {
	c, _ := store.ParseCompression(s.cfg.Compression)
	return c
}

func (s *Stream) syncPolicy() store.SyncPolicy {
	if s.cfg.Sync != "" {
		p, _ := store.ParseSyncPolicy(s.cfg.Sync)
		return p
	}
	return s.m.cfg.Sync
}

// start subscribes to the stream's subjects, keeping those of another's
// subscriptions it took over (handOver), and starts its writer and consumers.
func (s *Stream) start() error {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if !s.started {
		s.started = true
		go s.writer()
	}
	if s.repl == nil {
		if err := s.subscribe(s.cfg.Subjects); err != nil {
			return err
		}
	}
	s.cmu.RLock()
	for _, c := range s.consumers {
		c.start()
	}
	s.cmu.RUnlock()
	return nil
}

// subscribe makes the stream's subscriptions capture subjects: it keeps those
// of subjects it has, takes away the others, and adds the missing ones. A
// subject the stream keeps capturing is never without its subscription (an
// update, a leader elected again), so a message published meanwhile is not
// missed. cfgMu is held.
func (s *Stream) subscribe(subjects []string) error {
	kept := s.subs[:0]
	for _, c := range s.subs {
		if slices.Contains(subjects, c.filter) {
			kept = append(kept, c)
		} else {
			_ = s.m.broker.Unsubscribe(c.sub)
		}
	}
	clear(s.subs[len(kept):])
	s.subs = kept
	for _, f := range subjects {
		if slices.ContainsFunc(s.subs, func(c capture) bool { return c.filter == f }) {
			continue
		}
		var sink broker.Sink = (*captureSink)(s)
		switch {
		case s.prefix != "":
			sink = (*accountCaptureSink)(s)
		case f[0] == '*' || f[0] == '>':
			sink = (*globalWildCaptureSink)(s)
		}
		sub := &broker.Subscription{Sink: sink, Subject: s.prefix + f}
		if err := s.m.broker.Subscribe(sub); err != nil {
			return fmt.Errorf("stream %q: %w", s.name, err)
		}
		s.subs = append(s.subs, capture{f, sub})
		if s.acct == "" || s.m.cfg.Imports == nil {
			continue
		}
		// The subjects of other accounts this account imports: captured under
		// the account's names for them, as its clients receive them.
		for _, im := range s.m.cfg.Imports(s.acct, f) {
			sub := &broker.Subscription{Sink: &importCaptureSink{s: s, im: im}, Subject: im.Filter}
			if err := s.m.broker.Subscribe(sub); err != nil {
				return fmt.Errorf("stream %q: import %s: %w", s.name, im.Filter, err)
			}
			s.subs = append(s.subs, capture{f, sub})
		}
	}
	return nil
}

// importCaptureSink captures another account's exported messages for a stream
// of an account that imports them, under the account's names for them. A
// message crossing accounts carries no reply subject.
type importCaptureSink struct {
	s  *Stream
	im auth.ImportedSubscription
}

func (c *importCaptureSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	var buf [256]byte
	own := *m
	own.Subject = c.im.AppendLocal(buf[:0], m.Subject)
	own.Reply, own.Acker = nil, nil
	return (*captureSink)(c.s).Deliver(sub, &own)
}

func (c *importCaptureSink) Flush()                 { (*captureSink)(c.s).Flush() }
func (c *importCaptureSink) Stall() <-chan struct{} { return (*captureSink)(c.s).Stall() }
func (c *importCaptureSink) Stuck()                 {}

func (s *Stream) unsubscribe() {
	for _, c := range s.subs {
		_ = s.m.broker.Unsubscribe(c.sub)
	}
	s.subs = nil
}

// update applies a changed configuration: new subjects, limits and compression.
func (s *Stream) update(cfg streamapi.StreamConfig) error {
	def := streamDef{Config: cfg, Created: s.created, Group: s.group, Groups: s.groups, Account: s.acct}
	if err := writeJSON(filepath.Join(s.dir, "stream.json"), def, true); err != nil {
		return fmt.Errorf("stream %q: %w", s.name, err)
	}
	s.cfgMu.Lock()
	compactionSwitched := (s.cfg.Compaction() == nil) != (cfg.Compaction() == nil)
	s.cfg = cfg
	s.maxSize.Store(int64(cfg.MaxMsgSize))
	// Not held while the writer applies the settings: the writer reads the
	// configuration (Config) on its own rounds, and would wait for this.
	s.cfgMu.Unlock()
	err := s.onWriter(func() {
		for i, l := range s.parts {
			lc := s.logConfig(i)
			l.SetLimits(lc.MaxAge, lc.MaxBytes, lc.MaxMsgs, lc.Discard)
			if s.repl != nil {
				// A replica's logs are written by its groups' machines, not
				// this goroutine: each gives its log the settings before it
				// next writes, and learns its keys when it applies the first
				// compaction its leader proposes (applyCompaction).
				s.repl.machines[i].setCompression(lc.Compression)
				s.repl.machines[i].segmentAge.Store(int64(lc.SegmentAge))
				continue
			}
			if err := l.SetCompression(lc.Compression); err != nil {
				s.m.log.Error("stream compression", "stream", s.name, "partition", i, "err", err)
			}
			l.SetSegmentAge(lc.SegmentAge)
			if compactionSwitched {
				if err := l.SetKeys(lc.Keys); err != nil {
					s.m.log.Error("stream compaction switched", "stream", s.name, "partition", i, "err", err)
				}
			}
		}
		s.dedup.setWindow(time.Duration(cfg.DuplicateWindow))
	})
	if err != nil {
		return err
	}
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	if s.repl != nil && !s.repl.leader.Load() {
		return nil // a follower captures nothing
	}
	// A leader change meanwhile may have subscribed already; subscribe keeps
	// what is there.
	return s.subscribe(cfg.Subjects)
}

// Config returns the stream's configuration.
func (s *Stream) Config() streamapi.StreamConfig {
	s.cfgMu.RLock()
	defer s.cfgMu.RUnlock()
	return s.cfg
}

// Name returns the stream's name (in its account's terms).
func (s *Stream) Name() string { return s.name }

// Account returns the stream's account, "" for the global one.
func (s *Stream) Account() string { return s.acct }

// Key returns the stream's key in the manager (Key): its name for a stream of the
// global account.
func (s *Stream) Key() string { return s.key }

// close stops the writer and consumers; remove also deletes the stream's data.
func (s *Stream) close(remove bool) {
	s.cfgMu.Lock()
	s.unsubscribe()
	s.cfgMu.Unlock()
	s.stop()
	if remove {
		_ = os.RemoveAll(s.dir)
	}
}

// stop stops the writer and consumers and closes the logs. The subscriptions
// stay, for close to take away or handOver to give to the stream opened in s's
// place; what they capture meanwhile waits in the queue.
func (s *Stream) stop() {
	s.cfgMu.Lock()
	started := s.started
	s.cfgMu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	if started {
		<-s.stopped
	}
	s.cmu.Lock()
	cs := make([]*Consumer, 0, len(s.consumers))
	for _, c := range s.consumers {
		cs = append(cs, c)
	}
	s.cmu.Unlock()
	for _, c := range cs {
		c.stop(false)
	}
	s.closeLogs()
}

func (s *Stream) closeLogs() {
	for p, l := range s.parts {
		if s.repl != nil && p < len(s.repl.machines) {
			// A replica's log may be in a rewrite's hands (finishCleaning).
			s.repl.machines[p].mu.Lock()
		}
		if err := l.Close(); err != nil {
			s.m.log.Error("closing stream log", "stream", s.name, "err", err)
		}
		if s.repl != nil && p < len(s.repl.machines) {
			s.repl.machines[p].mu.Unlock()
		}
	}
}

// ---------------------------------------------------------------------------------
// Capturing

// captureSink is the Stream seen as a broker sink for its subjects.
type captureSink Stream

// Deliver queues a captured message for the writer. It copies the message, as the
// broker requires, and never blocks: flow control happens in Stall.
func (c *captureSink) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	s := (*Stream)(c).lockQueue()
	if len(s.q.buf)+len(s.held.buf) > s.m.cfg.MaxQueued {
		s.qmu.Unlock()
		return false
	}
	if s.groupOpen {
		s.held.add(m, s.maxSize.Load())
	} else {
		s.q.add(m, s.maxSize.Load())
	}
	s.qmu.Unlock()
	return true
}

// groupTicket is the stage of the group that writes straight into the queue.
type groupTicket struct{}

// DeliverGroup queues a captured message of a publisher's group
// (broker.Grouper) so that the group's messages are stored at consecutive
// sequences of their partition: straight into the queue when no other group is
// open (the other publishers' messages wait aside until EndGroup), else into a
// stage that EndGroup queues whole.
func (c *captureSink) DeliverGroup(_ *broker.Subscription, m *broker.Message, stage any) (any, bool) {
	s := (*Stream)(c).live()
	limit := s.m.cfg.MaxQueued
	switch g := stage.(type) {
	case *groupTicket:
		// A stream with an open group is not handed over: g is s's.
		s = s.lockQueue()
		defer s.qmu.Unlock()
		if len(s.q.buf) > limit {
			return g, false
		}
		s.q.add(m, s.maxSize.Load())
		return g, true
	case *inbound:
		if len(g.buf) > limit {
			return g, false
		}
		g.add(m, s.maxSize.Load())
		return g, true
	}
	// The group's first message here.
	s = s.lockQueue()
	if len(s.q.buf)+len(s.held.buf) > limit {
		s.qmu.Unlock()
		return nil, false
	}
	if !s.groupOpen {
		s.groupOpen = true
		s.q.add(m, s.maxSize.Load())
		s.qmu.Unlock()
		return &s.ticket, true
	}
	var g *inbound
	if n := len(s.stages); n > 0 {
		g, s.stages = s.stages[n-1], s.stages[:n-1]
	} else {
		g = &inbound{}
	}
	s.qmu.Unlock()
	g.add(m, s.maxSize.Load())
	return g, true
}

// EndGroup ends a group: what waited aside goes into the queue behind it, or a
// staged group goes in whole (aside, when another group is open).
func (c *captureSink) EndGroup(stage any) {
	s := (*Stream)(c).lockQueue()
	defer s.qmu.Unlock()
	switch g := stage.(type) {
	case *groupTicket:
		s.groupOpen = false
		if len(s.held.items) > 0 {
			s.q.appendAll(&s.held)
			s.held.reset()
			if cap(s.held.buf) > maxStageBuf {
				s.held = inbound{}
			}
		}
	case *inbound:
		switch {
		case s.groupOpen:
			s.held.appendAll(g)
		case len(s.q.items) == 0:
			s.q, *g = *g, s.q // no copy: the stage becomes the queue
		default:
			s.q.appendAll(g)
		}
		g.reset()
		if len(s.stages) < maxStages && cap(g.buf) <= maxStageBuf {
			s.stages = append(s.stages, g)
		}
	}
}

// maxStages and maxStageBuf bound the group stages a stream keeps for reuse.
const (
	maxStages   = 4
	maxStageBuf = 4 << 20
)

// accountCaptureSink is a stream of an account (not the global one) seen as a
// broker sink for its subjects: it keeps them in the account's terms.
type accountCaptureSink Stream

// Deliver queues a captured message without its account's prefix.
func (c *accountCaptureSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	var own broker.Message
	if m = c.own(m, &own); m == nil {
		return true
	}
	return (*captureSink)(c).Deliver(sub, m)
}

// DeliverGroup is Deliver for a message of a group (broker.Grouper).
func (c *accountCaptureSink) DeliverGroup(sub *broker.Subscription, m *broker.Message, stage any) (any, bool) {
	var own broker.Message
	if m = c.own(m, &own); m == nil {
		return stage, true
	}
	return (*captureSink)(c).DeliverGroup(sub, m, stage)
}

// own returns m in the account's terms (in *own when it takes a copy), or nil
// when the stream does not capture it. A message the engine delivers (routed
// to a deliver subject of the account) has its subject in the account's terms
// already.
func (c *accountCaptureSink) own(m, own *broker.Message) *broker.Message {
	s := (*Stream)(c)
	if len(m.Subject) <= len(s.prefix) || string(m.Subject[:len(s.prefix)]) != s.prefix {
		return m
	}
	*own = *m
	own.Subject = m.Subject[len(s.prefix):]
	if notCaptured(own.Subject) {
		return nil // the account's stream API and acks, which a wildcard reaches
	}
	return own
}

func (c *accountCaptureSink) EndGroup(stage any)     { (*captureSink)(c).EndGroup(stage) }
func (c *accountCaptureSink) Flush()                 { (*captureSink)(c).Flush() }
func (c *accountCaptureSink) FlushInline()           { (*captureSink)(c).FlushInline() }
func (c *accountCaptureSink) Stall() <-chan struct{} { return (*captureSink)(c).Stall() }
func (c *accountCaptureSink) Stuck()                 {}

// globalWildCaptureSink is a stream of the global account capturing a filter that
// starts with a wildcard, which the broker would match with other accounts'
// subjects ("$A.<account>. ..."), and with the server's own that no stream may
// capture: it leaves them out.
type globalWildCaptureSink Stream

func (c *globalWildCaptureSink) Deliver(sub *broker.Subscription, m *broker.Message) bool {
	if !c.captures(m) {
		return true
	}
	return (*captureSink)(c).Deliver(sub, m)
}

// DeliverGroup is Deliver for a message of a group (broker.Grouper).
func (c *globalWildCaptureSink) DeliverGroup(sub *broker.Subscription, m *broker.Message, stage any) (any, bool) {
	if !c.captures(m) {
		return stage, true
	}
	return (*captureSink)(c).DeliverGroup(sub, m, stage)
}

func (c *globalWildCaptureSink) captures(m *broker.Message) bool {
	route := m.Subject
	if m.Route != nil {
		route = m.Route
	}
	return !bytes.HasPrefix(route, acctPrefix) && !notCaptured(m.Subject)
}

var (
	ternPrefix = []byte("$TERN.")
	dlqPrefix  = []byte(streamapi.DeadLetterPrefix)
)

// notCaptured reports the server's subjects no stream captures (normalise refuses
// them as filters): all "$TERN." ones but dead letters.
func notCaptured(subj []byte) bool {
	return len(subj) > 0 && subj[0] == '$' && bytes.HasPrefix(subj, ternPrefix) && !bytes.HasPrefix(subj, dlqPrefix)
}

func (c *globalWildCaptureSink) EndGroup(stage any)     { (*captureSink)(c).EndGroup(stage) }
func (c *globalWildCaptureSink) Flush()                 { (*captureSink)(c).Flush() }
func (c *globalWildCaptureSink) FlushInline()           { (*captureSink)(c).FlushInline() }
func (c *globalWildCaptureSink) Stall() <-chan struct{} { return (*captureSink)(c).Stall() }
func (c *globalWildCaptureSink) Stuck()                 {}

// Flush wakes the writer.
func (c *captureSink) Flush() {
	select {
	case (*Stream)(c).live().kick <- struct{}{}:
	default:
	}
}

// FlushInline is Flush for a publisher that may do the writer's work itself
// (writeInline).
func (c *captureSink) FlushInline() {
	if !(*Stream)(c).live().writeInline() {
		c.Flush()
	}
}

// Stall asks publishers to wait while the writer is behind by more than a quarter of
// MaxQueued, so a burst is absorbed by TCP back-pressure instead of memory.
func (c *captureSink) Stall() <-chan struct{} {
	s := (*Stream)(c).lockQueue()
	defer s.qmu.Unlock()
	if len(s.q.buf) < s.m.cfg.MaxQueued/4 {
		return nil
	}
	if s.stallCh == nil {
		s.stallCh = make(chan struct{})
	}
	return s.stallCh
}

// Stuck is called when a publisher waited in vain; the writer keeps going regardless.
func (c *captureSink) Stuck() {}

// live returns the stream that captures for s: s, or the one that took its
// subscriptions over (handOver), or the one that took them from that.
func (s *Stream) live() *Stream {
	for n := s.next.Load(); n != nil; n = s.next.Load() {
		s = n
	}
	return s
}

// lockQueue is live with its queue locked.
func (s *Stream) lockQueue() *Stream {
	for s = s.live(); ; s = s.live() {
		s.qmu.Lock()
		if s.next.Load() == nil {
			return s
		}
		s.qmu.Unlock()
	}
}

// handOver makes t capture what s captured, s's writer having stopped: t
// takes s's subscriptions, so that no publish finds the subjects without a
// stream, and what s captured since its writer's last pass goes ahead of what
// t captures. t has not started.
func (s *Stream) handOver(t *Stream) {
	s.cfgMu.Lock()
	subs := s.subs
	s.subs = nil
	s.cfgMu.Unlock()
	for {
		s.qmu.Lock()
		if !s.groupOpen {
			break
		}
		// A publisher's group is written into the queue until its flush ends it.
		s.qmu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	t.qmu.Lock()
	t.q, s.q = s.q, t.q
	t.deletes = append(t.deletes, s.deletes...)
	t.interest = append(t.interest, s.interest...)
	s.deletes, s.interest = nil, nil
	s.next.Store(t)
	if s.stallCh != nil {
		close(s.stallCh) // its publishers ask t next
		s.stallCh = nil
	}
	t.qmu.Unlock()
	s.qmu.Unlock()
	t.cfgMu.Lock()
	t.subs = subs
	t.cfgMu.Unlock()
}

// queueDelete asks the writer to remove a message (work-queue or interest retention).
func (s *Stream) queueDelete(part int, seq uint64) {
	s = s.lockQueue()
	s.deletes = append(s.deletes, partSeq{part, seq})
	s.qmu.Unlock()
	(*captureSink)(s).Flush()
}

// ---------------------------------------------------------------------------------
// The writer

// expireEvery is how often the writer applies the age limit.
const expireEvery = time.Second

func (s *Stream) writer() {
	defer close(s.stopped)
	ticker := time.NewTicker(expireEvery)
	defer ticker.Stop()
	s.role.Lock()
	s.writerLive = true
	s.role.Unlock()
	for {
		select {
		case <-s.kick:
		case <-ticker.C:
			s.lockWriter()
			s.expire()
			s.role.Unlock()
			continue
		case <-s.cleaned:
			s.lockWriter()
			s.cleanParts()
			s.role.Unlock()
			continue
		case op := <-s.ops:
			s.lockWriter()
			s.writeBatch()
			op.fn()
			s.role.Unlock()
			close(op.done)
			continue
		case <-s.done:
			// Answer what is queued so publishers are not left waiting.
			s.lockWriter()
			s.writeBatch()
			s.writerLive = false
			s.role.Unlock()
			return
		}
		s.lockWriter()
		s.writeBatch()
		s.role.Unlock()
	}
}

// lockWriter takes the writer's role on the writer goroutine and first
// finishes the batch a publisher proposed inline, if any.
func (s *Stream) lockWriter() {
	s.role.Lock()
	if s.inPass {
		s.inPass = false
		s.finishReplicate(&s.cur)
		s.recycle(nil)
	}
}

// writerOp is work that must run on the writer goroutine, the only one that may
// change the logs.
type writerOp struct {
	fn   func()
	done chan struct{}
}

// onWriter runs fn on the writer goroutine and waits for it.
func (s *Stream) onWriter(fn func()) error {
	op := writerOp{fn: fn, done: make(chan struct{})}
	select {
	case s.ops <- op:
		<-op.done
		return nil
	case <-s.done:
		return fmt.Errorf("stream %q: %w", s.name, ErrClosed)
	}
}

func (s *Stream) expire() {
	s.compact()
	if s.repl != nil {
		s.expireReplicated() // a replica's log is written by its group's machine only
		return
	}
	if s.Config().MaxAge <= 0 {
		return
	}
	for i, l := range s.parts {
		if _, err := l.ExpireOld(); err != nil {
			s.m.log.Error("stream age limit", "stream", s.name, "partition", i, "err", err)
		}
	}
}

// writeBatch commits everything captured since the last batch, one commit per
// partition, then answers the publishers and wakes the consumers.
func (s *Stream) writeBatch() {
	for {
		dels, checks, ok := s.take(true)
		if !ok {
			return
		}
		s.write(dels, checks)
	}
}

// write writes the batch taken into s.cur with the removals taken beside it:
// committed here on a stream of one node, proposed and awaited on a replicated
// one.
func (s *Stream) write(dels, checks []partSeq) {
	if s.repl != nil {
		s.replicateRemovals(dels, checks)
		s.replicate(&s.cur)
	} else {
		s.applyDeletes(dels)
		s.checkInterest(checks)
		s.commit(&s.cur)
	}
	s.recycle(dels)
}

// take moves what was captured into s.cur, with the removals and interest
// checks queued when withRemovals (ok is false when there is nothing to do). It
// lets stalled publishers go on once the queue is emptied.
func (s *Stream) take(withRemovals bool) (dels, checks []partSeq, ok bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if len(s.q.items) == 0 && (!withRemovals || len(s.deletes) == 0 && len(s.interest) == 0) {
		if s.stallCh != nil {
			close(s.stallCh)
			s.stallCh = nil
		}
		return nil, nil, false
	}
	s.cur, s.q = s.q, inbound{}
	if n := len(s.spares); n > 0 {
		s.q, s.spares = s.spares[n-1], s.spares[:n-1]
	}
	if withRemovals {
		dels, checks = s.deletes, s.interest
		// The spare is the queue's now, and no longer a spare: a take that
		// hands out no removals recycles none, and the spare would otherwise
		// stay the queue's array, to be handed out while publishers append.
		s.deletes, s.interest, s.spareDel = s.spareDel[:0], nil, nil
	}
	if s.stallCh != nil && len(s.cur.buf) > 0 {
		// The queue was just emptied: publishers may go on.
		close(s.stallCh)
		s.stallCh = nil
	}
	return dels, checks, true
}

// recycle keeps the written batch's buffers (and dels's, unless nil) for the
// next one.
func (s *Stream) recycle(dels []partSeq) {
	s.cur.reset()
	s.qmu.Lock()
	if len(s.spares) < cap(s.spares) {
		s.spares = append(s.spares, s.cur)
	}
	s.cur = inbound{}
	if dels != nil {
		s.spareDel = dels[:0]
	}
	s.qmu.Unlock()
}

// writeInline does the writer's work for a captured batch on the publisher's
// goroutine that captured it, when the writer is idle. A stream of one node
// commits it there and then, answering its publishers. A replicated stream
// proposes the batch — its Raft entry appended and sent from here too when the
// group's loop is idle (replica.Host.Submit) — and leaves the wait for the
// commit to the writer goroutine, so the entry goes out without waking it first
// and the publisher is not held for the round trip. The acknowledgements leave
// from the goroutine that applies the entry (streamRepl.applied). It reports
// false when the writer must be woken instead: busy, still waiting for a batch,
// or with removals queued.
func (s *Stream) writeInline() bool {
	if !s.role.TryLock() {
		return false
	}
	defer s.role.Unlock()
	if !s.writerLive || s.inPass {
		return false
	}
	if s.repl == nil {
		if dels, checks, ok := s.take(true); ok {
			s.write(dels, checks)
		}
		return true
	}
	s.qmu.Lock()
	removals := len(s.deletes) > 0 || len(s.interest) > 0
	s.qmu.Unlock()
	if removals {
		return false
	}
	if _, _, ok := s.take(false); !ok {
		return true
	}
	s.startReplicate(&s.cur)
	if !s.proposeRound(&s.cur) {
		s.endReplicate(&s.cur)
		s.recycle(nil)
		return true
	}
	s.inPass = true
	return false // the writer waits for the commit
}

// queueInterestCheck asks the writer whether every consumer is now done with a
// message of an interest stream, and to remove it if so.
func (s *Stream) queueInterestCheck(key partSeq) {
	s = s.lockQueue()
	s.interest = append(s.interest, key)
	s.qmu.Unlock()
	(*captureSink)(s).Flush()
}

func (s *Stream) checkInterest(keys []partSeq) {
	for _, k := range s.interestDone(keys) {
		_ = s.parts[k.part].Delete(k.seq)
	}
}

// interestDone returns the messages among keys every consumer is done with.
func (s *Stream) interestDone(keys []partSeq) []partSeq {
	if len(keys) == 0 {
		return nil
	}
	cs := s.Consumers()
	var buf []byte
	var out []partSeq
	for _, k := range keys {
		rec, b, err := s.parts[k.part].Read(k.seq, buf)
		buf = b
		if err != nil {
			continue
		}
		if s.allAcked(cs, k, string(rec.Subject)) {
			out = append(out, k)
		}
	}
	return out
}

func (s *Stream) allAcked(cs []*Consumer, k partSeq, subj string) bool {
	for _, c := range cs {
		if !c.isAcked(k, subj) {
			return false
		}
	}
	return true
}

// sweepInterest removes every message of an interest stream that no remaining
// consumer still needs, after a consumer was deleted.
func (s *Stream) sweepInterest() {
	_ = s.onWriter(func() {
		cs := s.Consumers()
		for p, l := range s.parts {
			var done []uint64
			r := l.NewReader(l.State().FirstSeq)
			for {
				rec, err := r.Next()
				if err != nil {
					break
				}
				if s.allAcked(cs, partSeq{p, rec.Seq}, string(rec.Subject)) {
					done = append(done, rec.Seq)
				}
			}
			r.Close()
			if s.repl != nil {
				if len(done) == 0 {
					continue
				}
				if err := s.proposeRemoval(p, appendDeleteEntry(nil, done)); err != nil {
					s.m.log.Warn("removing messages no consumer needs", "stream", s.name, "partition", p, "err", err)
				}
				continue
			}
			for _, seq := range done {
				_ = l.Delete(seq)
			}
		}
	})
}

// applyDeletes removes acknowledged messages, one DeleteMany per partition so that
// a batch costs one fsync per tombstone file under the always policy.
func (s *Stream) applyDeletes(dels []partSeq) {
	if len(dels) == 0 {
		return
	}
	for p, l := range s.parts {
		s.delSeqs = s.delSeqs[:0]
		for _, d := range dels {
			if d.part == p {
				s.delSeqs = append(s.delSeqs, d.seq)
			}
		}
		if len(s.delSeqs) == 0 {
			continue
		}
		if _, err := l.DeleteMany(s.delSeqs); err != nil {
			s.m.log.Error("stream delete", "stream", s.name, "partition", p, "messages", len(s.delSeqs), "err", err)
		}
	}
}

func (s *Stream) commit(q *inbound) {
	now := time.Now().UnixNano()
	s.acks = s.acks[:0]
	clear(s.touched)
	interestNone := s.retention == streamapi.RetainInterest && s.numConsumers() == 0
	for i := range q.items {
		it := &q.items[i]
		a := pendingAck{reply: it.reply, acker: it.acker, ackTag: it.ackTag, part: -1}
		if it.tooBig {
			a.code, a.err = streamapi.CodeTooLarge, "message larger than the stream's max_msg_size"
			s.acks = append(s.acks, a)
			continue
		}
		hdr := header.Block(q.get(it.hdr))
		subj := q.get(it.subj)
		var c idCheck
		s.dedup.check(hdr, now, &c)
		if c.dup {
			a.part, a.seq, a.dup = c.part, c.seq, true
			s.acks = append(s.acks, a)
			continue
		}
		if wrong, code, text := s.dedup.wrongLast(&c, now); wrong {
			a.code, a.err = code, text
			s.acks = append(s.acks, a)
			continue
		}
		a.msgID = c.id
		part := s.partitionOf(subj, hdr)
		seq, err := s.parts[part].Append(subj, hdr, q.get(it.data), now)
		if err != nil {
			a.code, a.err = errorCode(err), err.Error()
			a.msgID = msgID{}
			s.acks = append(s.acks, a)
			continue
		}
		if a.msgID.id != "" {
			s.dedup.add(a.msgID, part, seq, now) // copies what it keeps of the id
		}
		a.part, a.seq = part, seq
		s.touched[part] = true
		s.acks = append(s.acks, a)
	}
	for p, t := range s.touched {
		if !t {
			continue
		}
		if err := s.parts[p].Commit(); err != nil {
			s.m.log.Error("stream commit failed", "stream", s.name, "partition", p, "err", err)
			code := errorCode(err)
			for i := range s.acks {
				a := &s.acks[i]
				if a.part == p && a.code == 0 && !a.dup {
					if a.msgID.id != "" {
						s.dedup.remove(a.msgID)
					}
					a.code, a.err = code, err.Error()
				}
			}
			s.touched[p] = false
		}
	}
	s.answer(q)
	if interestNone {
		// Nobody was interested: the messages were acknowledged and are gone.
		for i := range s.acks {
			if a := &s.acks[i]; a.code == 0 && !a.dup {
				_ = s.parts[a.part].Delete(a.seq)
			}
		}
		return
	}
	for p, t := range s.touched {
		if t {
			s.notify(p)
		}
	}
}

// answer sends the publishers of q the acks s.acks holds: a run of messages
// stored one after another for an in-process Acker gets one call.
func (s *Stream) answer(q *inbound) {
	s.ackBuf = answerAcks(s.m.broker, &s.batch, s.ackBuf, q, len(s.acks), func(k int) *pendingAck { return &s.acks[k] }, s.name)
}

// answerAcks answers the publishers of n acks (at(k), in order) of stream: in
// process, a run of acks of one Acker and tag on consecutive sequences in one
// call, or through br and batch b on their reply subjects, then flushes b. An
// ack with neither is skipped. It returns buf, grown.
func answerAcks(br *broker.Broker, b *broker.Batch, buf []byte, q *inbound, n int, at func(k int) *pendingAck, stream string) []byte {
	for i := 0; i < n; i++ {
		a := at(i)
		if a.acker != nil {
			run := 1
			if a.code == 0 {
				for i+run < n {
					c := at(i + run)
					if c.acker != a.acker || c.ackTag != a.ackTag || c.code != 0 || c.dup != a.dup || c.part != a.part || c.seq != a.seq+uint64(run) {
						break
					}
					run++
				}
			}
			a.acker.StreamAck(a.ackTag, a.part, a.seq, run, a.dup, a.code, a.err)
			i += run - 1
			continue
		}
		reply := q.get(a.reply)
		if len(reply) == 0 {
			continue
		}
		if a.code != 0 {
			buf = streamapi.AppendPubErr(buf[:0], a.code, a.err)
		} else {
			buf = streamapi.AppendPubAck(buf[:0], stream, a.part, a.seq, a.dup)
		}
		br.Publish(b, &broker.Message{Subject: reply, Payload: buf})
	}
	b.Flush()
	return buf
}

// errorCode maps a store error to the code a publisher sees.
func errorCode(err error) int {
	switch {
	case errors.Is(err, store.ErrFull):
		return streamapi.CodeLimits
	case errors.Is(err, store.ErrTooLarge):
		return streamapi.CodeTooLarge
	case errors.Is(err, store.ErrNoSpace):
		return streamapi.CodeUnavailable
	}
	return streamapi.CodeInternal
}

// partitionOf chooses a message's partition: the one it names, else by its key
// header, else by its subject.
func (s *Stream) partitionOf(subj []byte, hdr header.Block) int {
	n := len(s.parts)
	if n == 1 {
		return 0
	}
	if to, ok := hdr.Lookup(streamapi.HeaderToPartition); ok {
		if p, err := strconv.Atoi(to); err == nil && p >= 0 && p < n {
			return p
		}
	}
	h := fnv.New32a()
	if key, ok := hdr.Lookup(streamapi.HeaderKey); ok {
		_, _ = io.WriteString(h, key)
	} else {
		_, _ = h.Write(subj)
	}
	return int(h.Sum32() % uint32(n))
}

// notify wakes every consumer after new messages were committed to partition p.
func (s *Stream) notify(p int) {
	s.appendWatch.wake(p)
	s.cmu.RLock()
	for _, c := range s.consumers {
		c.wake()
	}
	s.cmu.RUnlock()
}

func (s *Stream) numConsumers() int {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	return len(s.consumers)
}

// rebuildDedup reloads the ids of messages stored within the duplicate window.
func (s *Stream) rebuildDedup() {
	since := time.Now().Add(-s.dedup.window).UnixNano()
	for p, l := range s.parts {
		r := l.NewReader(l.SeqForTime(since))
		for {
			rec, err := r.Next()
			if err != nil {
				break
			}
			if id, ok := header.Block(rec.Header).Lookup(streamapi.HeaderMsgID); ok && id != "" {
				s.dedup.add(parseMsgID(id), p, rec.Seq, rec.Time)
			}
		}
		r.Close()
	}
}

// ---------------------------------------------------------------------------------
// State

func (s *Stream) state() streamapi.StreamState {
	var st streamapi.StreamState
	for i, l := range s.parts {
		ls := l.State()
		ps := streamapi.StreamState{Msgs: ls.Msgs, Bytes: ls.Bytes, FirstSeq: ls.FirstSeq, LastSeq: ls.LastSeq,
			Deleted: ls.Deleted, FileBytes: uint64(max(l.FileBytes(), 0)), Keys: uint64(ls.Keys)}
		if ls.FirstTime != 0 && ls.Msgs > 0 {
			ps.FirstTime = time.Unix(0, ls.FirstTime).UTC()
		}
		if ls.LastTime != 0 {
			ps.LastTime = time.Unix(0, ls.LastTime).UTC()
		}
		st.Msgs += ps.Msgs
		st.Bytes += ps.Bytes
		st.Deleted += ps.Deleted
		st.FileBytes += ps.FileBytes
		st.Keys += ps.Keys
		if i == 0 || ps.FirstSeq < st.FirstSeq {
			st.FirstSeq = ps.FirstSeq
		}
		st.LastSeq = max(st.LastSeq, ps.LastSeq)
		if !ps.FirstTime.IsZero() && (st.FirstTime.IsZero() || ps.FirstTime.Before(st.FirstTime)) {
			st.FirstTime = ps.FirstTime
		}
		if ps.LastTime.After(st.LastTime) {
			st.LastTime = ps.LastTime
		}
		if len(s.parts) > 1 {
			ps.Partition = &i
			st.Parts = append(st.Parts, ps)
		}
	}
	st.Consumers = s.numConsumers()
	return st
}

// Info describes the stream.
func (s *Stream) Info() streamapi.StreamInfo {
	info := streamapi.StreamInfo{Config: s.Config(), Created: s.created, State: s.state(),
		Corrupt: append([]string(nil), s.corrupt...)}
	if describe := s.m.describeCluster.Load(); describe != nil && s.group != 0 {
		info.Cluster = (*describe)(s.group)
		if info.Cluster != nil && len(s.groups) > 1 {
			for _, g := range s.groups {
				if pc := (*describe)(g); pc != nil {
					info.Cluster.Partitions = append(info.Cluster.Partitions, *pc)
				}
			}
		}
	}
	return info
}

// Purge removes messages; see streamapi.PurgeRequest. It runs on the caller's
// goroutine but synchronises with the writer through the log.
func (s *Stream) Purge(req streamapi.PurgeRequest) (uint64, error) {
	if p := req.Partition; p != nil && (*p < 0 || *p >= len(s.parts)) {
		return 0, fmt.Errorf("stream %q: %w: no partition %d", s.name, ErrBadConfig, *p)
	}
	if s.repl != nil {
		return s.purgeReplicated(req)
	}
	var total uint64
	for i, l := range s.parts {
		if req.Partition != nil && *req.Partition != i {
			continue
		}
		var n uint64
		var err error
		purge := func() { n, err = purgeLog(l, req) }
		if werr := s.onWriter(purge); werr != nil {
			return total, werr
		}
		total += n
		if err != nil {
			return total, fmt.Errorf("stream %q: partition %d: purge: %w", s.name, i, err)
		}
	}
	s.cmu.RLock()
	for _, c := range s.consumers {
		c.purged()
	}
	s.cmu.RUnlock()
	return total, nil
}

// purgeLog applies a purge request to one log and returns how many messages it
// removed.
func purgeLog(l *store.Log, req streamapi.PurgeRequest) (uint64, error) {
	upTo := req.UpTo
	if req.Keep > 0 {
		var keepAll bool
		var err error
		if upTo, keepAll, err = keepFrom(l, req.Keep, req.Subject); err != nil || keepAll {
			return 0, err
		}
	}
	return l.Purge(upTo, req.Subject)
}

// keepFrom finds the sequence of the keep-th last live message (with the given
// subject, if any): purging below it keeps exactly keep messages. It walks back from
// the tail, so its cost grows with keep plus the deleted and other-subject messages
// among them, never with the stream's length. Run it on the writer.
func keepFrom(l *store.Log, keep uint64, subj string) (upTo uint64, keepAll bool, err error) {
	st := l.State()
	if st.Msgs <= keep {
		return 0, true, nil
	}
	if subj == "" && st.Deleted == 0 {
		return st.LastSeq + 1 - keep, false, nil
	}
	var buf []byte
	var rec store.Record
	kept := uint64(0)
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0; seq-- {
		rec, buf, err = l.Read(seq, buf)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		if subj != "" && string(rec.Subject) != subj {
			continue
		}
		if kept++; kept == keep {
			return seq, false, nil
		}
	}
	return 0, true, nil
}

// GetMsg reads one stored message.
func (s *Stream) GetMsg(req streamapi.MsgGetRequest) (streamapi.StoredMsg, error) {
	if req.Partition < 0 || req.Partition >= len(s.parts) {
		return streamapi.StoredMsg{}, fmt.Errorf("stream %q: no partition %d: %w", s.name, req.Partition, store.ErrNotFound)
	}
	l := s.parts[req.Partition]
	seq := req.Seq
	if req.LastBySubj != "" {
		seq = 0
		l.ForEachSubject(func(subj string, _, last uint64) bool {
			if subj == req.LastBySubj {
				seq = last
				return false
			}
			return true
		})
		if seq == 0 {
			return streamapi.StoredMsg{}, fmt.Errorf("stream %q: subject %q: %w", s.name, req.LastBySubj, store.ErrNotFound)
		}
	}
	rec, _, err := l.Read(seq, nil)
	if err != nil {
		return streamapi.StoredMsg{}, fmt.Errorf("stream %q: seq %d: %w", s.name, seq, err)
	}
	return streamapi.StoredMsg{Subject: string(rec.Subject), Seq: rec.Seq, Partition: req.Partition,
		Header: rec.Header, Data: rec.Payload, Time: time.Unix(0, rec.Time).UTC()}, nil
}
