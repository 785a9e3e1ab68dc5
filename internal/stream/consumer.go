package stream

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

// Defaults of consumer settings.
const (
	defaultAckWait       = 30 * time.Second
	defaultMaxAckPending = 10000
	defaultInactive      = 5 * time.Second
	defaultMemberTimeout = 10 * time.Second
	defaultPullExpires   = 30 * time.Second
	maxWaiting           = 512  // pull requests queued per consumer
	deliverChunk         = 1024 // messages per pass before flushing and yielding the lock
	interestPoll         = 100 * time.Millisecond
)

// Consumer is a view of a stream with its own position and acknowledgements.
type Consumer struct {
	s       *Stream
	name    string
	cfg     streamapi.ConsumerConfig
	created time.Time
	durable bool
	dir     string

	filter        string
	ackWait       time.Duration
	maxAckPending int
	deadLetter    string
	inactive      time.Duration
	memberTimeout time.Duration

	mu          sync.Mutex
	parts       []cpart
	pending     map[partSeq]*pendingMsg
	timers      redeliveryHeap
	waiting     []*pullRequest
	members     map[string]time.Time
	cseq        uint64
	redelivered uint64
	lastActive  time.Time
	jr          *journal
	dead        []deadLetter
	confirms    [][]byte
	// journalFailing is set while journal writes fail, to log the failure once.
	journalFailing bool
	rr             int
	closed         bool
	running        bool

	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	// Owned by the delivery goroutine.
	batch   broker.Batch
	ackSubj []byte
	rbuf    []byte
	hdrBuf  []byte
	jbuf    []byte
	lastSeq []uint64
}

type cpart struct {
	next       uint64 // next stream sequence to consider for a first delivery
	reader     *store.Reader
	readerNext uint64 // where reader stands; 0 when there is none
	redeliver  []uint64
	backlog    []uint64 // last-per-subject start: delivered before next
	owner      string   // consumer-group member, "" when there are no members
	nextDirty  bool

	// What a filtered consumer has yet to go through: counted live messages
	// matching the filter in [countFrom, countTo], countFrom following next as
	// the consumer reads. Counted again from scratch when next moves otherwise,
	// or when the log removed a matching message at or above checkedFrom (the
	// lowest countFrom since the last look at removals): the consumer may have
	// skipped a counted message that was removed before it got there.
	counted            bool
	countFrom, countTo uint64
	checkedFrom        uint64
	matching           uint64
	removals           *store.RemovalWatch
}

type pendingMsg struct {
	key        partSeq
	deliveries uint64
	deadline   int64
	idx        int // position in timers; -1 while queued for redelivery
}

type pullRequest struct {
	reply     []byte
	batch     int
	maxBytes  int
	expires   int64
	noWait    bool
	member    string
	sent      int
	sentBytes int
	// reject, when set, ends the request with a 409 status: requests arrive on
	// publishers' goroutines, and only the delivery goroutine sends.
	reject string
}

type deadLetter struct {
	key        partSeq
	deliveries uint64
	reason     string
}

// redeliveryHeap orders pending messages by ack deadline.
type redeliveryHeap []*pendingMsg

func (h redeliveryHeap) Len() int           { return len(h) }
func (h redeliveryHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h redeliveryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *redeliveryHeap) Push(x any) {
	p := x.(*pendingMsg)
	p.idx = len(*h)
	*h = append(*h, p)
}
func (h *redeliveryHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.idx = -1
	return p
}

// consumerDef is what consumer.json holds.
type consumerDef struct {
	Name    string                   `json:"name"`
	Config  streamapi.ConsumerConfig `json:"config"`
	Created time.Time                `json:"created"`
}

func (s *Stream) consumersDir() string { return filepath.Join(s.dir, "consumers") }

// openConsumers recovers the stream's durable consumers.
func (s *Stream) openConsumers() error {
	entries, err := os.ReadDir(s.consumersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %q: consumers: %w", s.name, err)
	}
	for _, e := range entries {
		dir := filepath.Join(s.consumersDir(), e.Name())
		var def consumerDef
		if err := readJSON(filepath.Join(dir, "consumer.json"), &def); err != nil {
			s.m.log.Warn("consumer directory without a readable definition, ignored", "stream", s.name, "dir", dir, "err", err)
			continue
		}
		c, err := s.newConsumer(def.Name, def.Config, def.Created, dir, nil)
		if err != nil {
			return err
		}
		s.consumers[def.Name] = c
	}
	return nil
}

// AddConsumer creates a consumer, or returns the existing durable one if the
// configuration is the same.
func (s *Stream) AddConsumer(name string, cfg streamapi.ConsumerConfig) (*Consumer, error) {
	durable := cfg.Durable != ""
	if durable {
		if name != "" && name != cfg.Durable {
			return nil, fmt.Errorf("consumer %q: %w: durable_name %q differs from the name in the subject", name, ErrBadConfig, cfg.Durable)
		}
		name = cfg.Durable
	} else if name == "" {
		name = cfg.Name
	}
	if name == "" {
		name = randomName()
	}
	cfg.Name = name
	if err := s.normaliseConsumer(&cfg); err != nil {
		return nil, err
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if c := s.consumers[name]; c != nil {
		if configsEqualJSON(c.cfg, cfg) {
			return c, nil
		}
		return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, ErrExists)
	}
	if s.m.cfg.MaxConsumers > 0 && len(s.consumers) >= s.m.cfg.MaxConsumers {
		return nil, fmt.Errorf("stream %q: %w: at most %d consumers", s.name, ErrLimit, s.m.cfg.MaxConsumers)
	}
	if s.retention == streamapi.RetainWorkQueue {
		for _, o := range s.consumers {
			if overlaps(filterOrAll(o.filter), filterOrAll(cfg.FilterSubject)) {
				return nil, fmt.Errorf("stream %q: consumer %q: %w: a work queue gives each message to one consumer, and %q already takes %q",
					s.name, name, ErrOverlap, o.name, filterOrAll(o.filter))
			}
		}
	}
	dir := ""
	created := time.Now().UTC()
	if durable {
		dir = filepath.Join(s.consumersDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, err)
		}
	}
	start := s.startState(cfg)
	if durable {
		if err := writeJSON(filepath.Join(dir, "state.json"), start, true); err != nil {
			return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, err)
		}
		if err := writeJSON(filepath.Join(dir, "consumer.json"), consumerDef{Name: name, Config: cfg, Created: created}, true); err != nil {
			return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, err)
		}
	}
	c, err := s.newConsumer(name, cfg, created, dir, &start)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	s.consumers[name] = c
	c.start()
	return c, nil
}

func filterOrAll(f string) string {
	if f == "" {
		return ">"
	}
	return f
}

func configsEqualJSON(a, b streamapi.ConsumerConfig) bool {
	// Times compare by instant, everything else by value.
	if (a.OptStartTime == nil) != (b.OptStartTime == nil) || a.OptStartTime != nil && !a.OptStartTime.Equal(*b.OptStartTime) {
		return false
	}
	a.OptStartTime, b.OptStartTime = nil, nil
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func (s *Stream) normaliseConsumer(cfg *streamapi.ConsumerConfig) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("stream %q: consumer %q: %w: %s", s.name, cfg.Name, ErrBadConfig, fmt.Sprintf(format, args...))
	}
	if err := streamapi.ValidName("consumer", cfg.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if cfg.FilterSubject != "" {
		if err := subject.ValidateFilter([]byte(cfg.FilterSubject)); err != nil {
			return bad("%v", err)
		}
		in := false
		for _, f := range s.Config().Subjects {
			if overlaps(f, cfg.FilterSubject) {
				in = true
			}
		}
		if !in {
			return bad("filter %q matches none of the stream's subjects", cfg.FilterSubject)
		}
	}
	switch cfg.DeliverPolicy {
	case "":
		cfg.DeliverPolicy = streamapi.DeliverAll
	case streamapi.DeliverAll, streamapi.DeliverNew, streamapi.DeliverLast, streamapi.DeliverLastPerSubject:
	case streamapi.DeliverByStartSeq:
		if cfg.OptStartSeq == 0 {
			return bad("deliver policy by_start_sequence needs opt_start_seq")
		}
	case streamapi.DeliverByStartTime:
		if cfg.OptStartTime == nil {
			return bad("deliver policy by_start_time needs opt_start_time")
		}
	default:
		return bad("deliver policy %q", cfg.DeliverPolicy)
	}
	switch cfg.AckPolicy {
	case "":
		cfg.AckPolicy = streamapi.AckExplicit
	case streamapi.AckExplicit, streamapi.AckAll, streamapi.AckNone:
	default:
		return bad("ack policy %q: want none, explicit or all", cfg.AckPolicy)
	}
	if s.retention == streamapi.RetainWorkQueue && cfg.AckPolicy == streamapi.AckNone {
		return bad("a work queue's consumers must acknowledge (ack policy explicit or all)")
	}
	if cfg.AckWait < 0 || cfg.MaxAckPending < 0 || cfg.InactiveThreshold < 0 || cfg.MemberTimeout < 0 {
		return bad("durations and limits must not be negative")
	}
	for _, b := range cfg.Backoff {
		if b <= 0 {
			return bad("backoff durations must be positive")
		}
	}
	if cfg.DeliverSubject != "" {
		if err := subject.ValidatePublish([]byte(cfg.DeliverSubject)); err != nil {
			return bad("deliver subject: %v", err)
		}
		if cfg.DeliverGroup != "" {
			if err := subject.ValidateQueue([]byte(cfg.DeliverGroup)); err != nil {
				return bad("deliver group: %v", err)
			}
		}
	} else if cfg.DeliverGroup != "" {
		return bad("deliver_group needs deliver_subject")
	}
	if cfg.DeadLetterSubject != "" {
		if err := subject.ValidatePublish([]byte(cfg.DeadLetterSubject)); err != nil {
			return bad("dead letter subject: %v", err)
		}
	}
	if cfg.MaxDeliver < 0 {
		cfg.MaxDeliver = 0
	}
	return nil
}

// startState computes a new consumer's position from its deliver policy.
func (s *Stream) startState(cfg streamapi.ConsumerConfig) consumerState {
	st := consumerState{Parts: make([]partState, len(s.parts))}
	for i, l := range s.parts {
		ls := l.State()
		p := &st.Parts[i]
		switch cfg.DeliverPolicy {
		case streamapi.DeliverAll:
			p.Next = ls.FirstSeq
		case streamapi.DeliverNew, streamapi.DeliverLastPerSubject:
			p.Next = ls.LastSeq + 1
		case streamapi.DeliverLast:
			p.Next = ls.LastSeq + 1
			if cfg.FilterSubject == "" {
				if ls.Msgs > 0 {
					p.Next = ls.LastSeq
				}
			} else {
				var last uint64
				l.ForEachSubject(func(subj string, _, seq uint64) bool {
					if subject.Matches(cfg.FilterSubject, subj) {
						last = max(last, seq)
					}
					return true
				})
				if last > 0 {
					p.Next = last
				}
			}
		case streamapi.DeliverByStartSeq:
			p.Next = max(cfg.OptStartSeq, ls.FirstSeq)
		case streamapi.DeliverByStartTime:
			p.Next = l.SeqForTime(cfg.OptStartTime.UnixNano())
		}
		if p.Next == 0 {
			p.Next = 1
		}
	}
	return st
}

// newConsumer builds a consumer from its definition and position. start is nil when
// recovering a durable consumer, whose position is on disk.
func (s *Stream) newConsumer(name string, cfg streamapi.ConsumerConfig, created time.Time, dir string, start *consumerState) (*Consumer, error) {
	c := &Consumer{
		s: s, name: name, cfg: cfg, created: created, durable: dir != "", dir: dir,
		filter:        cfg.FilterSubject,
		ackWait:       time.Duration(cfg.AckWait),
		maxAckPending: cfg.MaxAckPending,
		deadLetter:    cfg.DeadLetterSubject,
		inactive:      time.Duration(cfg.InactiveThreshold),
		memberTimeout: time.Duration(cfg.MemberTimeout),
		parts:         make([]cpart, len(s.parts)),
		pending:       make(map[partSeq]*pendingMsg),
		members:       make(map[string]time.Time),
		lastActive:    time.Now(),
		kick:          make(chan struct{}, 1),
		done:          make(chan struct{}),
		stopped:       make(chan struct{}),
		lastSeq:       make([]uint64, len(s.parts)),
	}
	if c.ackWait <= 0 {
		c.ackWait = defaultAckWait
	}
	if c.maxAckPending <= 0 {
		c.maxAckPending = defaultMaxAckPending
	}
	if c.deadLetter == "" {
		c.deadLetter = streamapi.DeadLetterPrefix + s.name + "." + name
	}
	if c.inactive <= 0 {
		c.inactive = defaultInactive
	}
	if c.memberTimeout <= 0 {
		c.memberTimeout = defaultMemberTimeout
	}
	if cfg.DeliverPolicy == streamapi.DeliverLastPerSubject && start != nil {
		for i, l := range s.parts {
			var seqs []uint64
			l.ForEachSubject(func(subj string, _, last uint64) bool {
				if c.filter == "" || subject.Matches(c.filter, subj) {
					seqs = append(seqs, last)
				}
				return true
			})
			slices.Sort(seqs)
			c.parts[i].backlog = seqs
		}
	}
	st := consumerState{Parts: make([]partState, len(s.parts))}
	if start != nil {
		st = *start
	}
	if c.durable {
		jr, loaded, err := openJournal(dir, len(s.parts), s.syncPolicy(), s.m.cfg.SyncInterval)
		if err != nil {
			return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, err)
		}
		c.jr = jr
		st = loaded
	}
	c.cseq, c.redelivered = st.ConsumerSeq, st.Redelivered
	deadline := time.Now().Add(c.ackWait).UnixNano()
	for i, p := range st.Parts {
		if i >= len(c.parts) {
			break
		}
		c.parts[i].next = max(p.Next, 1)
		for _, e := range p.Pending {
			pm := &pendingMsg{key: partSeq{i, e[0]}, deliveries: e[1], deadline: deadline}
			c.pending[pm.key] = pm
			heap.Push(&c.timers, pm)
		}
	}
	return c, nil
}

func randomName() string {
	b := make([]byte, 8)
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	now := uint64(time.Now().UnixNano())
	for i := range b {
		b[i] = digits[now%36]
		now /= 36
	}
	return "eph-" + string(b) + strconv.FormatUint(uint64(fastrand()), 36)
}

var randState struct {
	sync.Mutex
	x uint64
}

func fastrand() uint32 {
	randState.Lock()
	defer randState.Unlock()
	if randState.x == 0 {
		randState.x = uint64(time.Now().UnixNano()) | 1
	}
	randState.x ^= randState.x << 13
	randState.x ^= randState.x >> 7
	randState.x ^= randState.x << 17
	return uint32(randState.x)
}

// Consumer returns the named consumer.
func (s *Stream) Consumer(name string) (*Consumer, error) {
	s.cmu.RLock()
	c := s.consumers[name]
	s.cmu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, ErrConsumerNotFound)
	}
	return c, nil
}

func (s *Stream) consumerBytes(name []byte) *Consumer {
	s.cmu.RLock()
	c := s.consumers[string(name)]
	s.cmu.RUnlock()
	return c
}

// Consumers lists the stream's consumers in name order.
func (s *Stream) Consumers() []*Consumer {
	s.cmu.RLock()
	out := make([]*Consumer, 0, len(s.consumers))
	for _, c := range s.consumers {
		out = append(out, c)
	}
	s.cmu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// DeleteConsumer removes a consumer and its state.
func (s *Stream) DeleteConsumer(name string) error {
	s.cmu.Lock()
	c := s.consumers[name]
	if c == nil {
		s.cmu.Unlock()
		return fmt.Errorf("stream %q: consumer %q: %w", s.name, name, ErrConsumerNotFound)
	}
	delete(s.consumers, name)
	s.cmu.Unlock()
	c.stop(true)
	if s.retention == streamapi.RetainInterest {
		s.sweepInterest()
	}
	return nil
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.name }

// start launches the delivery goroutine.
func (c *Consumer) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.closed {
		return
	}
	c.running = true
	go c.run()
}

// stop ends the delivery goroutine, answers waiting pulls and closes (or removes) the
// consumer's files.
func (c *Consumer) stop(remove bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	running := c.running
	close(c.done)
	c.mu.Unlock()
	if running {
		<-c.stopped
	}
	c.mu.Lock()
	for _, r := range c.waiting {
		c.sendStatus(r, streamapi.StatusConflict, "consumer deleted")
	}
	c.waiting = nil
	for i := range c.parts {
		if c.parts[i].reader != nil {
			c.parts[i].reader.Close()
			c.parts[i].reader = nil
		}
		if w := c.parts[i].removals; w != nil {
			w.Stop()
			c.parts[i].removals = nil
		}
	}
	if c.jr != nil {
		_ = c.jr.flush(c.takeJournal())
		if err := c.jr.close(); err != nil {
			c.s.m.log.Error("closing consumer journal", "stream", c.s.name, "consumer", c.name, "err", err)
		}
	}
	c.mu.Unlock()
	c.batch.Flush()
	if remove && c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

func (c *Consumer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// purged resets readers after messages were purged under them.
func (c *Consumer) purged() {
	c.mu.Lock()
	for i := range c.parts {
		cp := &c.parts[i]
		first := c.s.parts[i].State().FirstSeq
		if cp.next < first {
			cp.next = first
			cp.nextDirty = true
		}
		cp.readerNext = 0
	}
	c.mu.Unlock()
	c.wake()
}

// ---------------------------------------------------------------------------------
// Acks and pulls (called on the publishing connection's goroutine)

func (c *Consumer) ack(ref *streamapi.AckRef, kind streamapi.AckKind, delay time.Duration, reason []byte, confirm []byte) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.lastActive = time.Now()
	key := partSeq{ref.Partition, ref.StreamSeq}
	if c.cfg.AckPolicy == streamapi.AckAll && kind == streamapi.Ack {
		c.ackUpTo(key)
	} else if pm := c.pending[key]; pm != nil {
		switch kind {
		case streamapi.Ack:
			c.acked(pm)
		case streamapi.Nak:
			if delay <= 0 {
				c.queueRedelivery(pm)
			} else {
				c.reschedule(pm, time.Now().Add(delay).UnixNano())
			}
		case streamapi.InProgress:
			c.reschedule(pm, time.Now().Add(c.ackWaitFor(pm.deliveries)).UnixNano())
		case streamapi.Term:
			c.removePending(pm)
			if c.jr != nil { // like an ack: never delivered again, even after a restart
				c.jr.add(recAcked, uint64(pm.key.part), pm.key.seq)
			}
			c.dead = append(c.dead, deadLetter{key: pm.key, deliveries: pm.deliveries, reason: "terminated: " + string(reason)})
		}
	}
	if confirm != nil {
		c.confirms = append(c.confirms, confirm)
	}
	c.mu.Unlock()
	c.wake()
}

// acked forgets a pending message and applies the stream's retention.
func (c *Consumer) acked(pm *pendingMsg) {
	c.removePending(pm)
	if c.jr != nil {
		c.jr.add(recAcked, uint64(pm.key.part), pm.key.seq)
	}
	c.retire(pm.key)
}

// retire tells the stream a message is done with by this consumer.
func (c *Consumer) retire(key partSeq) {
	switch c.s.retention {
	case streamapi.RetainWorkQueue:
		c.s.queueDelete(key.part, key.seq)
	case streamapi.RetainInterest:
		c.s.queueInterestCheck(key)
	}
}

func (c *Consumer) ackUpTo(key partSeq) {
	var done []*pendingMsg
	for k, pm := range c.pending {
		if k.part == key.part && k.seq <= key.seq {
			done = append(done, pm)
		}
	}
	for _, pm := range done {
		c.removePending(pm)
		c.retire(pm.key)
	}
	if c.jr != nil && len(done) > 0 {
		c.jr.add(recAckedUpTo, uint64(key.part), key.seq)
	}
}

func (c *Consumer) removePending(pm *pendingMsg) {
	delete(c.pending, pm.key)
	if pm.idx >= 0 {
		heap.Remove(&c.timers, pm.idx)
		return
	}
	// Queued for redelivery: take it out of its partition's queue.
	cp := &c.parts[pm.key.part]
	if i := slices.Index(cp.redeliver, pm.key.seq); i >= 0 {
		cp.redeliver = slices.Delete(cp.redeliver, i, i+1)
	}
}

func (c *Consumer) reschedule(pm *pendingMsg, deadline int64) {
	if pm.idx < 0 {
		return // already due
	}
	pm.deadline = deadline
	heap.Fix(&c.timers, pm.idx)
}

func (c *Consumer) queueRedelivery(pm *pendingMsg) {
	if pm.idx < 0 {
		return
	}
	heap.Remove(&c.timers, pm.idx)
	c.parts[pm.key.part].redeliver = append(c.parts[pm.key.part].redeliver, pm.key.seq)
}

func (c *Consumer) ackWaitFor(deliveries uint64) time.Duration {
	if n := len(c.cfg.Backoff); n > 0 {
		i := min(int(deliveries)-1, n-1)
		return time.Duration(c.cfg.Backoff[max(i, 0)])
	}
	return c.ackWait
}

// pull queues a pull request.
func (c *Consumer) pull(reply []byte, req streamapi.PullRequest) {
	now := time.Now()
	r := &pullRequest{reply: reply, batch: req.Batch, maxBytes: req.MaxBytes, noWait: req.NoWait, member: req.Member}
	exp := time.Duration(req.Expires)
	if exp <= 0 {
		exp = defaultPullExpires
	}
	r.expires = now.Add(exp).UnixNano()
	if r.batch <= 0 {
		r.batch = 1
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.cfg.DeliverSubject != "" {
		r.reject = "push consumer: pull not allowed"
	}
	c.lastActive = now
	if r.member != "" {
		if _, ok := c.members[r.member]; !ok {
			c.members[r.member] = now
			c.rebalance()
		} else {
			c.members[r.member] = now
		}
	}
	if len(c.waiting) >= maxWaiting {
		// The oldest gives way; the delivery goroutine tells its client.
		for _, old := range c.waiting {
			if old.reject == "" {
				old.reject = "too many waiting pull requests"
				break
			}
		}
	}
	c.waiting = append(c.waiting, r)
	c.mu.Unlock()
	c.wake()
}

// rebalance assigns partitions to consumer-group members: partition i goes to the
// (i mod n)-th member in name order. A partition that changes hands has its pending
// messages redelivered to the new owner at once.
func (c *Consumer) rebalance() {
	names := sortedKeys(c.members)
	for i := range c.parts {
		owner := ""
		if len(names) > 0 {
			owner = names[i%len(names)]
		}
		cp := &c.parts[i]
		if cp.owner == owner {
			continue
		}
		cp.owner = owner
		for _, pm := range c.pending {
			if pm.key.part == i {
				c.queueRedelivery(pm)
			}
		}
	}
	c.s.m.log.Debug("consumer group rebalanced", "stream", c.s.name, "consumer", c.name, "members", names)
}

// ---------------------------------------------------------------------------------
// Delivery goroutine

func (c *Consumer) run() {
	defer close(c.stopped)
	// The first pass runs at once: a push consumer has a backlog to send and an
	// ephemeral one an inactivity clock to start before anything wakes it.
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.kick:
		case <-timer.C:
		case <-c.done:
			return
		}
		for {
			more, wait, remove := c.pass()
			c.batch.Flush()
			c.batch.WaitStalled(10 * time.Millisecond)
			if remove {
				go func() { _ = c.s.DeleteConsumer(c.name) }()
				<-c.done
				return
			}
			if !more {
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				timer.Reset(wait)
				break
			}
			select {
			case <-c.done:
				return
			default:
			}
		}
	}
}

// pass does one round of delivery work under the lock. It reports whether there is
// more to do at once, else how long until the next timed event, and whether an idle
// ephemeral consumer should be removed.
func (c *Consumer) pass() (more bool, wait time.Duration, remove bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	nowNs := now.UnixNano()
	wait = time.Hour
	until := func(t int64) {
		if d := time.Duration(t - nowNs); d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	for i, l := range c.s.parts {
		c.lastSeq[i] = l.State().LastSeq
	}

	// Members that went quiet leave the group.
	changed := false
	for m, seen := range c.members {
		if now.Sub(seen) > c.memberTimeout {
			delete(c.members, m)
			changed = true
		} else {
			until(seen.Add(c.memberTimeout).UnixNano() + 1)
		}
	}
	if changed {
		c.rebalance()
	}

	// Ack deadlines that passed: redeliver, or dead-letter after MaxDeliver.
	for len(c.timers) > 0 && c.timers[0].deadline <= nowNs {
		pm := heap.Pop(&c.timers).(*pendingMsg)
		if c.cfg.MaxDeliver > 0 && pm.deliveries >= uint64(c.cfg.MaxDeliver) {
			delete(c.pending, pm.key)
			if c.jr != nil {
				c.jr.add(recAcked, uint64(pm.key.part), pm.key.seq)
			}
			c.dead = append(c.dead, deadLetter{key: pm.key, deliveries: pm.deliveries, reason: "max deliveries reached"})
			continue
		}
		c.parts[pm.key.part].redeliver = append(c.parts[pm.key.part].redeliver, pm.key.seq)
	}
	if len(c.timers) > 0 {
		until(c.timers[0].deadline)
	}

	c.deadLetters()

	// Pull requests that expired.
	kept := c.waiting[:0]
	for _, r := range c.waiting {
		if r.reject != "" {
			c.sendStatus(r, streamapi.StatusConflict, r.reject)
			continue
		}
		if r.expires <= nowNs {
			c.sendStatus(r, streamapi.StatusTimeout, "request expired")
			continue
		}
		until(r.expires)
		kept = append(kept, r)
	}
	clear(c.waiting[len(kept):])
	c.waiting = kept

	more = c.deliver(nowNs)

	if c.cfg.DeliverSubject != "" {
		if c.s.m.broker.HasInterest([]byte(c.cfg.DeliverSubject)) {
			c.lastActive = now
		} else {
			until(nowNs + int64(interestPoll))
		}
	}
	if len(c.waiting) > 0 {
		c.lastActive = now
	}
	if !c.durable {
		idle := now.Sub(c.lastActive)
		if idle >= c.inactive {
			return false, wait, true
		}
		until(c.lastActive.Add(c.inactive).UnixNano() + 1)
	}
	var journalErr error
	if c.jr != nil {
		journalErr = c.flushJournal()
		if c.jr.dirty || journalErr != nil {
			until(nowNs + int64(c.s.m.cfg.SyncInterval))
		}
	}
	// Confirm synchronous acks only now that the journal holds them; when it could
	// not, say so (an empty confirmation is success): the ack is applied here, but
	// a restart would deliver the message again.
	var failure []byte
	if journalErr != nil && len(c.confirms) > 0 {
		failure, _ = json.Marshal(streamapi.Response[struct{}]{Error: &streamapi.APIError{
			Code: streamapi.CodeUnavailable, Description: "ack not stored: " + journalErr.Error()}})
	}
	for _, r := range c.confirms {
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: r, Payload: failure})
	}
	c.confirms = c.confirms[:0]
	return more, wait, false
}

// deliver sends messages while there is a taker and room under MaxAckPending. It
// reports whether it stopped only because it did a chunk's worth.
func (c *Consumer) deliver(now int64) bool {
	explicit := c.cfg.AckPolicy != streamapi.AckNone
	push := c.cfg.DeliverSubject != ""
	if push && !c.s.m.broker.HasInterest([]byte(c.cfg.DeliverSubject)) {
		return false
	}
	for n := 0; n < deliverChunk; n++ {
		if explicit && len(c.pending) >= c.maxAckPending {
			c.endNoWait("max ack pending reached")
			return false
		}
		var req *pullRequest
		var route []byte
		member, any := "", true
		if push {
			route = []byte(c.cfg.DeliverSubject)
		} else {
			i := c.nextRequest()
			if i < 0 {
				c.endNoWait("no partitions assigned")
				return false
			}
			req = c.waiting[i]
			route = req.reply
			member, any = req.member, req.member == ""
		}
		part, seq, rec, redelivery, ok := c.next(member, any)
		if !ok {
			if req != nil && req.noWait {
				c.dropRequest(req, streamapi.StatusNoMessages, "no messages")
				continue
			}
			return false
		}
		if req != nil && req.maxBytes > 0 && req.sent > 0 && req.sentBytes+len(rec.Payload) > req.maxBytes {
			// Does not fit: hand the message back and end this request.
			c.unread(part, seq, redelivery)
			c.dropRequest(req, streamapi.StatusTimeout, "max bytes reached")
			continue
		}
		var pm *pendingMsg
		deliveries := uint64(1)
		if explicit {
			pm = c.pending[partSeq{part, seq}]
			if pm == nil {
				pm = &pendingMsg{key: partSeq{part, seq}, idx: -1}
				c.pending[pm.key] = pm
			}
			pm.deliveries++
			deliveries = pm.deliveries
			pm.deadline = now + int64(c.ackWaitFor(pm.deliveries))
			if pm.idx >= 0 {
				heap.Fix(&c.timers, pm.idx)
			} else {
				heap.Push(&c.timers, pm)
			}
			if c.jr != nil {
				c.jr.add(recDelivered, uint64(part), seq, pm.deliveries)
			}
		}
		if redelivery {
			c.redelivered++
		}
		c.cseq++
		meta := streamapi.AckMeta{Stream: c.s.name, Consumer: c.name, Partition: part, Deliveries: deliveries,
			StreamSeq: seq, ConsumerSeq: c.cseq, Time: rec.Time, Pending: c.numPendingLocked()}
		c.ackSubj = streamapi.AppendAckSubject(c.ackSubj[:0], &meta)
		msg := broker.Message{Subject: rec.Subject, Route: route, Reply: c.ackSubj, Header: rec.Header, Payload: rec.Payload}
		if push {
			msg.Group = c.cfg.DeliverGroup
		}
		if c.s.m.broker.Publish(&c.batch, &msg) == 0 {
			// Nobody took it (the puller went away): deliver it again soon.
			if pm != nil {
				c.queueRedelivery(pm)
			}
			if req != nil {
				c.dropRequest(req, "", "")
			}
			continue
		}
		if !explicit && c.s.retention == streamapi.RetainInterest {
			c.s.queueInterestCheck(partSeq{part, seq})
		}
		if req != nil {
			req.sent++
			req.sentBytes += len(rec.Payload)
			if req.sent >= req.batch {
				c.dropRequest(req, "", "")
			}
		}
	}
	return true
}

// endNoWait answers the waiting no-wait requests when nothing can be delivered now.
func (c *Consumer) endNoWait(why string) {
	for i := 0; i < len(c.waiting); {
		if r := c.waiting[i]; r.noWait {
			c.dropRequest(r, streamapi.StatusNoMessages, why)
			continue
		}
		i++
	}
}

// nextRequest picks the first waiting request that can be served.
func (c *Consumer) nextRequest() int {
	for i, r := range c.waiting {
		if r.member == "" || c.ownsAny(r.member) {
			return i
		}
	}
	return -1
}

func (c *Consumer) ownsAny(member string) bool {
	for i := range c.parts {
		if c.parts[i].owner == member {
			return true
		}
	}
	return false
}

func (c *Consumer) dropRequest(r *pullRequest, status, desc string) {
	if i := slices.Index(c.waiting, r); i >= 0 {
		c.waiting = slices.Delete(c.waiting, i, i+1)
	}
	if status != "" {
		c.sendStatus(r, status, desc)
	}
}

// next finds the next message for a taker: redeliveries first, then the last-per-
// subject backlog, then new messages, visiting partitions round-robin.
func (c *Consumer) next(member string, any bool) (part int, seq uint64, rec store.Record, redelivery, ok bool) {
	n := len(c.parts)
	for k := 0; k < n; k++ {
		i := (c.rr + k) % n
		cp := &c.parts[i]
		if !any && cp.owner != member {
			continue
		}
		for len(cp.redeliver) > 0 {
			seq := cp.redeliver[0]
			cp.redeliver = cp.redeliver[1:]
			r, buf, err := c.s.parts[i].Read(seq, c.rbuf)
			c.rbuf = buf
			if err != nil {
				if pm := c.pending[partSeq{i, seq}]; pm != nil {
					delete(c.pending, pm.key)
				}
				if !errors.Is(err, store.ErrNotFound) {
					c.s.m.log.Error("consumer redelivery read", "stream", c.s.name, "consumer", c.name, "partition", i, "seq", seq, "err", err)
				}
				continue
			}
			c.rr = i + 1
			return i, seq, r, true, true
		}
		for len(cp.backlog) > 0 {
			seq := cp.backlog[0]
			cp.backlog = cp.backlog[1:]
			r, buf, err := c.s.parts[i].Read(seq, c.rbuf)
			c.rbuf = buf
			if err == nil {
				c.rr = i + 1
				return i, seq, r, false, true
			}
		}
		if r, ok := c.readNew(i); ok {
			c.rr = i + 1
			return i, r.Seq, r, false, true
		}
	}
	return 0, 0, store.Record{}, false, false
}

// readNew reads the next message of partition i that passes the filter.
func (c *Consumer) readNew(i int) (store.Record, bool) {
	cp := &c.parts[i]
	if cp.next > c.lastSeq[i] {
		return store.Record{}, false
	}
	if cp.reader == nil || cp.readerNext != cp.next {
		if cp.reader != nil {
			cp.reader.Close()
		}
		cp.reader = c.s.parts[i].NewReader(cp.next)
		cp.readerNext = cp.next
	}
	for skipped := 0; skipped < 4096; skipped++ {
		rec, err := cp.reader.Next()
		if err == io.EOF {
			return store.Record{}, false
		}
		if err != nil {
			var corr *store.Corruption
			if errors.As(err, &corr) && corr.LastSeq >= cp.next {
				c.s.m.log.Error("consumer skips corrupt messages", "stream", c.s.name, "consumer", c.name,
					"partition", i, "first", corr.FirstSeq, "last", corr.LastSeq, "err", err)
				cp.next = corr.LastSeq + 1
				cp.nextDirty = true
				cp.readerNext = 0
				return store.Record{}, false
			}
			c.s.m.log.Error("consumer read", "stream", c.s.name, "consumer", c.name, "partition", i, "err", err)
			cp.readerNext = 0
			return store.Record{}, false
		}
		prev := cp.next
		cp.next = rec.Seq + 1
		cp.readerNext = cp.next
		cp.nextDirty = true
		matched := c.filter == "" || subject.Matches(c.filter, string(rec.Subject))
		if cp.counted && cp.countFrom == prev {
			switch {
			case rec.Seq > cp.countTo: // nothing counted was left before it
				cp.matching, cp.countTo = 0, rec.Seq
			case matched:
				cp.matching--
			}
			cp.countFrom = cp.next
		}
		if !matched {
			continue
		}
		return rec, true
	}
	return store.Record{}, false
}

// unread hands back a message next returned but that was not delivered.
func (c *Consumer) unread(part int, seq uint64, redelivery bool) {
	cp := &c.parts[part]
	if redelivery {
		cp.redeliver = append([]uint64{seq}, cp.redeliver...)
		return
	}
	if seq < cp.next {
		if cp.counted && cp.countFrom == cp.next && cp.next == seq+1 {
			cp.countFrom, cp.matching = seq, cp.matching+1 // it passed the filter
			cp.checkedFrom = min(cp.checkedFrom, seq)
		}
		cp.next = seq
		cp.readerNext = 0
	}
}

// numPendingLocked is how many messages the consumer has yet to go through for a
// first delivery: the live messages from its position on that pass its filter.
func (c *Consumer) numPendingLocked() uint64 {
	var n uint64
	for i := range c.parts {
		cp := &c.parts[i]
		if c.filter == "" {
			n += c.s.parts[i].CountFrom(cp.next)
		} else {
			n += c.matchingLocked(i)
		}
		n += uint64(len(cp.backlog))
	}
	return n
}

// matchingLocked counts the live messages of partition i from the consumer's
// position on that match its filter: what it counted before, kept up to date as
// it read, plus what has been appended since; all again when that no longer holds.
func (c *Consumer) matchingLocked(i int) uint64 {
	cp := &c.parts[i]
	l := c.s.parts[i]
	if cp.removals == nil && !c.closed {
		filter := c.filter
		cp.removals = l.WatchRemovals(func(subj []byte) bool { return subject.Matches(filter, string(subj)) })
		cp.counted = false
	}
	if cp.removals != nil {
		if high := cp.removals.Take(); high != 0 && high >= cp.checkedFrom {
			cp.counted = false
		}
	}
	if cp.countFrom != cp.next || cp.removals == nil {
		cp.counted = false
	}
	from := cp.countTo + 1
	if !cp.counted {
		cp.countFrom, cp.countTo, cp.matching = cp.next, cp.next-1, 0
		from = cp.next
	}
	cp.checkedFrom = cp.countFrom
	end := l.State().LastSeq
	if end < from {
		cp.counted = true
		return cp.matching
	}
	r := l.NewReader(from)
	defer r.Close()
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		var corr *store.Corruption
		if errors.As(err, &corr) {
			continue // unreadable: never delivered either
		}
		if err != nil {
			c.s.m.log.Error("consumer pending count", "stream", c.s.name, "consumer", c.name, "partition", i, "err", err)
			cp.counted = false
			return cp.matching
		}
		if rec.Seq > end {
			break
		}
		if subject.Matches(c.filter, string(rec.Subject)) {
			cp.matching++
		}
	}
	cp.countTo, cp.counted = end, true
	return cp.matching
}

// sendStatus ends a pull request with a status message on its reply subject.
func (c *Consumer) sendStatus(r *pullRequest, status, desc string) {
	h := header.Append(c.hdrBuf[:0], header.Status, status)
	h = header.Append(h, header.Description, desc)
	h = header.Append(h, streamapi.HeaderPending, strconv.FormatUint(c.numPendingLocked(), 10))
	if r.member != "" {
		var parts []string
		for i := range c.parts {
			if c.parts[i].owner == r.member {
				parts = append(parts, strconv.Itoa(i))
			}
		}
		h = header.Append(h, streamapi.HeaderAssigned, strings.Join(parts, ","))
	}
	c.hdrBuf = h
	c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: r.reply, Header: h})
}

// deadLetters publishes messages that reached MaxDeliver or were terminated to the
// dead-letter subject, with headers naming their origin.
func (c *Consumer) deadLetters() {
	for _, d := range c.dead {
		rec, buf, err := c.s.parts[d.key.part].Read(d.key.seq, c.rbuf)
		c.rbuf = buf
		if err != nil {
			continue
		}
		h := append(c.hdrBuf[:0], rec.Header...)
		h = header.Append(h, streamapi.HeaderStream, c.s.name)
		h = header.Append(h, streamapi.HeaderSeq, strconv.FormatUint(d.key.seq, 10))
		h = header.Append(h, streamapi.HeaderPartition, strconv.Itoa(d.key.part))
		h = header.Append(h, streamapi.HeaderConsumer, c.name)
		h = header.Append(h, streamapi.HeaderDeliveries, strconv.FormatUint(d.deliveries, 10))
		h = header.Append(h, streamapi.HeaderReason, d.reason)
		c.hdrBuf = h
		c.s.m.broker.Publish(&c.batch, &broker.Message{Subject: []byte(c.deadLetter), Header: h, Payload: rec.Payload})
		c.s.m.log.Info("message dead-lettered", "stream", c.s.name, "consumer", c.name, "partition", d.key.part,
			"seq", d.key.seq, "deliveries", d.deliveries, "reason", d.reason, "subject", c.deadLetter)
		c.retire(d.key)
	}
	c.dead = c.dead[:0]
}

// takeJournal returns the buffered journal records, including the cursor moves.
func (c *Consumer) takeJournal() []byte {
	for i := range c.parts {
		if c.parts[i].nextDirty {
			c.jr.add(recNext, uint64(i), c.parts[i].next)
			c.parts[i].nextDirty = false
		}
	}
	if len(c.jr.buf) == 0 {
		return nil
	}
	c.jr.add(recConsSeq, c.cseq, c.redelivered)
	recs := c.jr.buf
	c.jr.buf = c.jbuf[:0]
	c.jbuf = recs
	return recs
}

// flushJournal writes what happened since the last flush. Records that could not be
// written stay queued for the next flush, which retries them.
func (c *Consumer) flushJournal() error {
	recs := c.takeJournal()
	if err := c.jr.flush(recs); err != nil {
		c.jr.buf = append(c.jr.buf[:0], recs...)
		if !c.journalFailing {
			c.s.m.log.Error("consumer journal", "stream", c.s.name, "consumer", c.name, "err", err)
		}
		c.journalFailing = true
		return err
	}
	if c.journalFailing {
		c.journalFailing = false
		c.s.m.log.Info("consumer journal written again", "stream", c.s.name, "consumer", c.name)
	}
	if c.jr.size > compactAt {
		c.snapshot()
	}
	return nil
}

// snapshot writes the whole position and empties the journal.
func (c *Consumer) snapshot() {
	st := consumerState{ConsumerSeq: c.cseq, Redelivered: c.redelivered, Parts: make([]partState, len(c.parts))}
	for i := range c.parts {
		st.Parts[i].Next = c.parts[i].next
	}
	for k, pm := range c.pending {
		st.Parts[k.part].Pending = append(st.Parts[k.part].Pending, [2]uint64{k.seq, pm.deliveries})
	}
	sync := c.s.syncPolicy() != store.SyncNever
	if err := writeJSON(filepath.Join(c.dir, "state.json"), st, sync); err != nil {
		c.s.m.log.Error("consumer snapshot", "stream", c.s.name, "consumer", c.name, "err", err)
		return
	}
	if err := c.jr.reset(); err != nil {
		c.s.m.log.Error("consumer journal reset", "stream", c.s.name, "consumer", c.name, "err", err)
	}
}

// isAcked reports whether this consumer is done with a message (interest retention).
func (c *Consumer) isAcked(key partSeq, subj string) bool {
	if c.filter != "" && !subject.Matches(c.filter, subj) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if key.seq >= c.parts[key.part].next {
		return false
	}
	_, pending := c.pending[key]
	return !pending
}

// Info describes the consumer.
func (c *Consumer) Info() streamapi.ConsumerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, l := range c.s.parts {
		c.lastSeq[i] = l.State().LastSeq
	}
	info := streamapi.ConsumerInfo{Stream: c.s.name, Name: c.name, Config: c.cfg, Created: c.created,
		NumPending: c.numPendingLocked(), NumAckPending: len(c.pending), NumRedelivered: c.redelivered,
		NumWaiting: len(c.waiting), Members: sortedKeys(c.members)}
	info.Partitions = make([]streamapi.PartitionState, len(c.parts))
	for i := range c.parts {
		cp := &c.parts[i]
		ps := streamapi.PartitionState{Partition: i, Delivered: cp.next - 1, AckFloor: cp.next - 1, Member: cp.owner}
		for k := range c.pending {
			if k.part == i {
				ps.AckPending++
				ps.AckFloor = min(ps.AckFloor, k.seq-1)
			}
		}
		info.Partitions[i] = ps
	}
	return info
}
