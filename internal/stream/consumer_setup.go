package stream

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/stream/consumer"
	"github.com/tern-mq/tern/internal/streamapi"
	"github.com/tern-mq/tern/internal/subject"
)

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
		s.cmu.RLock()
		open := s.consumers[e.Name()] != nil
		s.cmu.RUnlock()
		if open {
			continue
		}
		var def consumerDef
		if err := readJSON(filepath.Join(dir, "consumer.json"), &def); err != nil {
			s.m.log.Warn("consumer directory without a readable definition, ignored", "stream", s.name, "dir", dir, "err", err)
			continue
		}
		c, err := s.newConsumer(def.Name, def.Config, def.Created, dir, nil)
		if err != nil {
			return err
		}
		s.cmu.Lock()
		s.consumers[def.Name] = c
		s.cmu.Unlock()
	}
	return nil
}

// AddConsumer creates a consumer, or returns the existing durable one if the
// configuration is the same.
func (s *Stream) AddConsumer(name string, cfg streamapi.ConsumerConfig) (*Consumer, error) {
	if s.repl != nil && !s.repl.leader.Load() {
		return nil, fmt.Errorf("stream %q: %w: consumers run on the leader of the stream's group", s.name, ErrNotLeader)
	}
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
	if c, err := s.checkNewConsumer(name, cfg); c != nil || err != nil {
		return c, err
	}
	if durable && s.repl != nil {
		// Created through the group: its Apply starts it here, taking the lock.
		s.cmu.Unlock()
		defer s.cmu.Lock()
		return s.addReplicatedConsumer(cfg)
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

// checkNewConsumer returns the consumer of that name if it exists with this
// configuration, or the error creating it would give. s.cmu is held.
func (s *Stream) checkNewConsumer(name string, cfg streamapi.ConsumerConfig) (*Consumer, error) {
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
	return nil, nil
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
		if strings.HasPrefix(cfg.DeliverSubject, auth.AccountPrefix) {
			return bad("deliver subject %q: reserved for accounts", cfg.DeliverSubject)
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
		if strings.HasPrefix(cfg.DeadLetterSubject, auth.AccountPrefix) {
			return bad("dead letter subject %q: reserved for accounts", cfg.DeadLetterSubject)
		}
	}
	if cfg.MaxDeliver < 0 {
		cfg.MaxDeliver = 0
	}
	return nil
}

// startState computes a new consumer's position from its deliver policy.
func (s *Stream) startState(cfg streamapi.ConsumerConfig) consumer.State {
	st := consumer.State{Parts: make([]consumer.PartState, len(s.parts))}
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
// recovering a durable consumer, whose position is on disk. A durable consumer of a
// replicated stream starts from its committed position (start) and proposes its
// journal records to the stream's group instead of writing them.
func (s *Stream) newConsumer(name string, cfg streamapi.ConsumerConfig, created time.Time, dir string, start *consumer.State) (*Consumer, error) {
	durable := dir != ""
	replicated := durable && s.repl != nil
	c := &Consumer{
		s: s, name: name, cfg: cfg, created: created, durable: durable, replicated: replicated, dir: dir,
		filter:     cfg.FilterSubject,
		deadLetter: cfg.DeadLetterSubject,
		kick:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	c.src = source{c: c, parts: make([]sourcePart, len(s.parts)), lastSeq: make([]uint64, len(s.parts))}
	if c.deadLetter == "" {
		c.deadLetter = streamapi.DeadLetterPrefix + s.name + "." + name
	}
	// The broker's names: in the stream's account's subject space.
	c.deadLetter = s.prefix + c.deadLetter
	if cfg.DeliverSubject != "" {
		c.deliverSubj = []byte(s.prefix + cfg.DeliverSubject)
	}
	var backlog [][]uint64
	if cfg.DeliverPolicy == streamapi.DeliverLastPerSubject && start != nil {
		backlog = make([][]uint64, len(s.parts))
		for i, l := range s.parts {
			var seqs []uint64
			l.ForEachSubject(func(subj string, _, last uint64) bool {
				if c.filter == "" || subject.Matches(c.filter, subj) {
					seqs = append(seqs, last)
				}
				return true
			})
			slices.Sort(seqs)
			backlog[i] = seqs
		}
	}
	var st consumer.State
	if start != nil {
		st = *start
	}
	if durable && !replicated {
		jr, loaded, err := openJournal(dir, len(s.parts), s.syncPolicy(), s.m.cfg.SyncInterval)
		if err != nil {
			return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, name, err)
		}
		c.jr = jr
		st = loaded
	}
	c.m = consumer.New(consumer.FromAPI(cfg, len(s.parts), durable), st, backlog, time.Now())
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
	if c.replicated {
		s.cmu.Unlock()
		return s.deleteReplicatedConsumer(name)
	}
	delete(s.consumers, name)
	s.cmu.Unlock()
	c.stop(true)
	if s.retention == streamapi.RetainInterest {
		s.sweepInterest()
	}
	return nil
}
