package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tern-mq/tern/internal/stream/consumer"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Replicated consumers. The durable consumers of a replicated stream are entries of
// the stream's group: their creation, their removal and every journal record their
// machine produces. Every replica applies them to files of its own (the consumer's
// definition, state.json and journal, as on a single node), so the replica that
// becomes leader starts each consumer where the last leader's committed records
// left it: acknowledged messages are not delivered again. Only the leader runs
// consumers; its delivery goroutine proposes the journal records instead of writing
// them, and confirms synchronous acks once they are committed.
//
// Entries, integers unsigned varints, strings and byte fields a length then bytes:
//
//	op 3 (add)      name  definition (JSON consumerDef)  start (JSON consumer.State)
//	op 4 (delete)   name
//	op 5 (journal)  name  records (consumer journal records)
const (
	entryConsumerAdd     byte = 3
	entryConsumerDelete  byte = 4
	entryConsumerJournal byte = 5
)

// appendConsumerEntry encodes a consumer entry of op with its fields.
func appendConsumerEntry(dst []byte, op byte, name string, fields ...[]byte) []byte {
	dst = appendField(append(dst, op), []byte(name))
	for _, f := range fields {
		dst = appendField(dst, f)
	}
	return dst
}

// consumerEntry is a decoded consumer entry.
type consumerEntry struct {
	op     byte
	name   string
	fields [2][]byte // add: definition, start; journal: records
}

func decodeConsumerEntry(b []byte) (consumerEntry, error) {
	var e consumerEntry
	if len(b) == 0 {
		return e, fmt.Errorf("%w: empty", errBadEntry)
	}
	e.op, b = b[0], b[1:]
	n := 0
	switch e.op {
	case entryConsumerAdd:
		n = 2
	case entryConsumerDelete:
	case entryConsumerJournal:
		n = 1
	default:
		return e, fmt.Errorf("%w: unknown op %d", errBadEntry, e.op)
	}
	var name []byte
	b, err := readFields(b, "consumer entry", &name)
	if err != nil {
		return e, err
	}
	if err := streamapi.ValidName("consumer", string(name)); err != nil {
		return e, fmt.Errorf("%w: %w", errBadEntry, err)
	}
	e.name = string(name)
	for i := range n {
		if b, err = readFields(b, "consumer entry", &e.fields[i]); err != nil {
			return e, err
		}
	}
	if len(b) != 0 {
		return e, fmt.Errorf("%w: %d bytes after a consumer entry", errBadEntry, len(b))
	}
	return e, nil
}

// replicaConsumer is one durable consumer as a replica keeps it: its definition,
// its position as the committed records give it, and its journal file.
type replicaConsumer struct {
	def     consumerDef
	st      consumer.State
	jr      *journal
	pending [][]byte // records applied in this Apply, written at its end
	// pendingTo is the group log index of the last entry in pending.
	pendingTo uint64
}

// consumerSet is a replicated stream's durable consumers on one replica; the Raft
// loop changes it (Apply, Restore) and the leader's stream reads it.
type consumerSet struct {
	s  *Stream
	mu sync.Mutex
	m  map[string]*replicaConsumer
}

// load opens the consumers found on disk (their state as last written).
func (cs *consumerSet) load() error {
	cs.m = map[string]*replicaConsumer{}
	entries, err := os.ReadDir(cs.s.consumersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stream %q: consumers: %w", cs.s.name, err)
	}
	for _, e := range entries {
		dir := filepath.Join(cs.s.consumersDir(), e.Name())
		var def consumerDef
		if err := readJSON(filepath.Join(dir, "consumer.json"), &def); err != nil {
			cs.s.m.log.Warn("consumer directory without a readable definition, ignored", "stream", cs.s.name, "dir", dir, "err", err)
			continue
		}
		jr, st, err := openJournal(dir, len(cs.s.parts), cs.s.syncPolicy(), cs.s.m.cfg.SyncInterval)
		if err != nil {
			return fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
		}
		cs.m[def.Name] = &replicaConsumer{def: def, st: st, jr: jr}
	}
	return nil
}

func (cs *consumerSet) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, rc := range cs.m {
		_ = rc.jr.close()
	}
	cs.m = map[string]*replicaConsumer{}
}

// apply applies one consumer entry; journal records are kept for flush.
func (cs *consumerSet) apply(index uint64, b []byte) error {
	e, err := decodeConsumerEntry(b)
	if err != nil {
		return err
	}
	// The leader's stream hears of additions and removals once the set is
	// unlocked: starting a consumer reads its position from the set.
	added, removed := false, false
	defer func() {
		switch {
		case added:
			cs.s.replicaConsumerAdded(e.name)
		case removed:
			cs.s.replicaConsumerRemoved(e.name)
		}
	}()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	rc := cs.m[e.name]
	switch e.op {
	case entryConsumerAdd:
		if rc != nil {
			return nil // applied again after a restart
		}
		var def consumerDef
		var st consumer.State
		if err := json.Unmarshal(e.fields[0], &def); err != nil {
			return fmt.Errorf("%w: consumer definition: %v", errBadEntry, err)
		}
		if err := json.Unmarshal(e.fields[1], &st); err != nil {
			return fmt.Errorf("%w: consumer start: %v", errBadEntry, err)
		}
		if rc, err = cs.create(def, st); err != nil {
			return err
		}
		cs.m[e.name] = rc
		added = true
	case entryConsumerDelete:
		if rc == nil {
			return nil
		}
		delete(cs.m, e.name)
		_ = rc.jr.close()
		removed = true
		if err := os.RemoveAll(filepath.Join(cs.s.consumersDir(), e.name)); err != nil {
			return fmt.Errorf("stream %q: removing consumer %q: %w", cs.s.name, e.name, err)
		}
	case entryConsumerJournal:
		// Records of a consumer deleted since are dropped, and so are those its
		// journal holds already: after a restart the group's log is applied again
		// from its last snapshot, and a delivery record applied again after its
		// ack would make the message pending again.
		if rc != nil && index > rc.st.Applied && index > rc.pendingTo {
			rc.pending = append(rc.pending, e.fields[0])
			rc.pendingTo = index
		}
	}
	return nil
}

// create writes a new consumer's files.
func (cs *consumerSet) create(def consumerDef, st consumer.State) (*replicaConsumer, error) {
	dir := filepath.Join(cs.s.consumersDir(), def.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
	}
	if err := cs.writeState(dir, def, st); err != nil {
		return nil, err
	}
	jr, _, err := openJournal(dir, len(cs.s.parts), cs.s.syncPolicy(), cs.s.m.cfg.SyncInterval)
	if err != nil {
		return nil, fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
	}
	if err := jr.reset(); err != nil {
		_ = jr.close()
		return nil, fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
	}
	return &replicaConsumer{def: def, st: st, jr: jr}, nil
}

func (cs *consumerSet) writeState(dir string, def consumerDef, st consumer.State) error {
	if err := writeJSON(filepath.Join(dir, "state.json"), st, true); err != nil {
		return fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
	}
	if err := writeJSON(filepath.Join(dir, "consumer.json"), def, true); err != nil {
		return fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, def.Name, err)
	}
	return nil
}

// flush writes the records each consumer got in this Apply, one chunk per
// consumer, and replaces a journal grown past compactAt by a snapshot.
func (cs *consumerSet) flush() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for name, rc := range cs.m {
		if len(rc.pending) == 0 {
			continue
		}
		// A replica that has not yet opened the partitions the leader added
		// takes its records for them all the same.
		if n := consumer.ReplayGrowing(&rc.st, rc.pending, streamapi.MaxPartitions); n != len(rc.pending) {
			return fmt.Errorf("stream %q: consumer %q: %w: journal records", cs.s.name, name, errBadEntry)
		}
		var all []byte
		for _, r := range rc.pending {
			all = append(all, r...)
		}
		// The chunk ends with the index it brings the consumer to, in the same
		// write: a chunk is applied whole or not at all.
		last := consumer.AppendRecord(nil, consumer.RecApplied, rc.pendingTo)
		consumer.Replay(&rc.st, [][]byte{last})
		all = append(all, last...)
		rc.pending = rc.pending[:0]
		if err := rc.jr.flush(all); err != nil {
			return fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, name, err)
		}
		if rc.jr.size > compactAt {
			if err := cs.compact(rc); err != nil {
				return err
			}
		}
	}
	return nil
}

func (cs *consumerSet) compact(rc *replicaConsumer) error {
	dir := filepath.Join(cs.s.consumersDir(), rc.def.Name)
	if err := writeJSON(filepath.Join(dir, "state.json"), rc.st, true); err != nil {
		return fmt.Errorf("stream %q: consumer %q: %w", cs.s.name, rc.def.Name, err)
	}
	return rc.jr.reset()
}

// snapshotConsumer is a consumer in a partition snapshot.
type snapshotConsumer struct {
	Def   consumerDef    `json:"def"`
	State consumer.State `json:"state"`
}

// snapshot compacts every journal into its state and returns the consumers.
func (cs *consumerSet) snapshot() ([]snapshotConsumer, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]snapshotConsumer, 0, len(cs.m))
	for _, rc := range cs.m {
		if err := cs.compact(rc); err != nil {
			return nil, err
		}
		out = append(out, snapshotConsumer{Def: rc.def, State: rc.st})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Def.Name < out[j].Def.Name })
	return out, nil
}

// restore replaces the consumers by a snapshot's.
func (cs *consumerSet) restore(snap []snapshotConsumer) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	keep := map[string]bool{}
	for _, sc := range snap {
		keep[sc.Def.Name] = true
		if rc := cs.m[sc.Def.Name]; rc != nil {
			rc.st, rc.pending = sc.State, nil
			if err := cs.compact(rc); err != nil {
				return err
			}
			continue
		}
		rc, err := cs.create(sc.Def, sc.State)
		if err != nil {
			return err
		}
		cs.m[sc.Def.Name] = rc
	}
	for name, rc := range cs.m {
		if !keep[name] {
			delete(cs.m, name)
			_ = rc.jr.close()
			cs.s.replicaConsumerRemoved(name)
			if err := os.RemoveAll(filepath.Join(cs.s.consumersDir(), name)); err != nil {
				return fmt.Errorf("stream %q: removing consumer %q: %w", cs.s.name, name, err)
			}
		}
	}
	return nil
}

// position returns a copy of a consumer's definition and committed position.
func (cs *consumerSet) position(name string) (consumerDef, consumer.State, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	rc := cs.m[name]
	if rc == nil {
		return consumerDef{}, consumer.State{}, false
	}
	st := rc.st
	st.Parts = make([]consumer.PartState, len(rc.st.Parts))
	for i, p := range rc.st.Parts {
		st.Parts[i] = consumer.PartState{Next: p.Next, Pending: append([][2]uint64(nil), p.Pending...)}
	}
	return rc.def, st, true
}

func (cs *consumerSet) names() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]string, 0, len(cs.m))
	for name := range cs.m {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------------------------
// The leader's side

// leaderLease is how long a quorum's confirmation of this node's leadership
// lets its consumers deliver without asking again. A follower grants no vote
// for an election timeout (400 ms by default, CheckQuorum's leader stickiness)
// after it last heard from its leader, so no other leader can be elected within
// it; the lease is a quarter of that, for clocks that run at different rates
// and for the time between the confirmation and a delivery. Only a transfer of
// leadership can elect another leader sooner, and then both leaders deliver
// for at most this long: at-least-once, as a consumer's deliveries are.
const leaderLease = 100 * time.Millisecond

// confirmLeader returns once a quorum of the group has confirmed, within the
// last leaderLease, that this node leads it, and this node has applied
// everything committed until then. Asking the quorum once per lease rather than
// per delivery pass keeps a replaying consumer from waiting on the followers.
func (s *Stream) confirmLeader() error {
	r := s.repl
	asked := time.Now()
	if lease := r.leaseUntil.Load(); lease != nil && asked.Before(*lease) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// A plain read index is served on any replica (through the leader): only
	// one that checks this replica's own leadership proves a deposed leader,
	// paused or cut off, that it no longer leads.
	if _, err := r.r.LeaderReadIndex(ctx, r.groups[0]); err != nil {
		r.leaseUntil.Store(nil)
		return fmt.Errorf("stream %q: %w: %w", s.name, ErrNotLeader, err)
	}
	until := asked.Add(leaderLease) // from before the quorum was asked
	r.leaseUntil.Store(&until)
	return nil
}

// proposeEntry commits an entry of the stream's own group, partition 0's
// (consumers), and returns once this node applied it.
func (s *Stream) proposeEntry(entry []byte) error {
	return s.proposeTo(0, entry)
}

// proposeTo commits an entry of partition p's group (removals, purges) and returns
// once this node applied it.
func (s *Stream) proposeTo(p int, entry []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
	defer cancel()
	if _, err := s.repl.r.Propose(ctx, s.repl.groups[p], entry); err != nil {
		if len(s.repl.groups) > 1 {
			return fmt.Errorf("stream %q: partition %d: %w: %w", s.name, p, ErrNotLeader, err)
		}
		return fmt.Errorf("stream %q: %w: %w", s.name, ErrNotLeader, err)
	}
	return nil
}

// addReplicatedConsumer creates a durable consumer of a replicated stream through
// its group; the leader's Apply starts it.
func (s *Stream) addReplicatedConsumer(cfg streamapi.ConsumerConfig) (*Consumer, error) {
	def := consumerDef{Name: cfg.Name, Config: cfg, Created: time.Now().UTC()}
	start := s.startState(cfg)
	defJSON, _ := json.Marshal(def)
	startJSON, _ := json.Marshal(start)
	if err := s.proposeEntry(appendConsumerEntry(nil, entryConsumerAdd, cfg.Name, defJSON, startJSON)); err != nil {
		return nil, err
	}
	s.cmu.RLock()
	c := s.consumers[cfg.Name]
	s.cmu.RUnlock()
	if c == nil {
		return nil, fmt.Errorf("stream %q: consumer %q: %w: leadership moved while it was created", s.name, cfg.Name, ErrNotLeader)
	}
	if !configsEqualJSON(c.cfg, cfg) {
		return nil, fmt.Errorf("stream %q: consumer %q: %w", s.name, cfg.Name, ErrExists)
	}
	return c, nil
}

// replicaConsumerAdded runs on the Raft loop once a consumer's creation is applied:
// the leader starts it.
func (s *Stream) replicaConsumerAdded(name string) {
	if s.repl.leader.Load() {
		s.startReplicaConsumer(name)
	}
}

// replicaConsumerRemoved runs on the Raft loop once a consumer's removal is
// applied: a running consumer stops (off the loop: its delivery goroutine may be
// waiting for the loop to commit its records).
func (s *Stream) replicaConsumerRemoved(name string) {
	s.cmu.Lock()
	c := s.consumers[name]
	delete(s.consumers, name)
	s.cmu.Unlock()
	if c != nil {
		go c.stop(false)
	}
}

// startReplicaConsumer starts a durable consumer of a replicated stream from its
// committed position, unless it runs already.
func (s *Stream) startReplicaConsumer(name string) {
	def, st, ok := s.repl.consumers().position(name)
	if !ok {
		return
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.consumers[name] != nil {
		return
	}
	c, err := s.newConsumer(name, def.Config, def.Created, filepath.Join(s.consumersDir(), name), &st)
	if err != nil {
		s.m.log.Error("starting a replicated consumer", "stream", s.name, "consumer", name, "err", err)
		return
	}
	s.consumers[name] = c
	c.start()
}

// deleteReplicatedConsumer removes a durable consumer of a replicated stream through
// its group.
func (s *Stream) deleteReplicatedConsumer(name string) error {
	return s.proposeEntry(appendConsumerEntry(nil, entryConsumerDelete, name))
}

// proposeJournal commits a replicated consumer's journal records.
func (c *Consumer) proposeJournal(records []byte) error {
	return c.s.proposeEntry(appendConsumerEntry(nil, entryConsumerJournal, c.name, records))
}
