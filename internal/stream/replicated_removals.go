package stream

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tern-mq/tern/internal/streamapi"
)

// Removals in a replicated stream. What removes messages besides the store's own
// limits (which every replica applies alike as it appends) is decided by the
// leader and applied by every replica from the group's log: acknowledged messages
// of a work queue, messages every consumer of an interest stream is done with, and
// messages past max_age by the leader's clock.
//
//	op 6 (delete)  count  count times: seq
//	op 7 (expire)  cutoff (zig-zag varint, Unix ns): remove what was stored before
//	op 8 (purge)   token  request (JSON streamapi.PurgeRequest)
//
// A purge is decided on each replica's log from the request: the logs are alike at
// that point of the group's log, so every replica removes the same messages. The
// proposer's token gets it the count.
const (
	entryDelete byte = 6
	entryExpire byte = 7
	entryPurge  byte = 8
)

// maxDeleteSeqs bounds one delete entry.
const maxDeleteSeqs = 1 << 20

func appendDeleteEntry(dst []byte, seqs []uint64) []byte {
	dst = append(dst, entryDelete)
	dst = binary.AppendUvarint(dst, uint64(len(seqs)))
	for _, s := range seqs {
		dst = binary.AppendUvarint(dst, s)
	}
	return dst
}

func appendExpireEntry(dst []byte, cutoff int64) []byte {
	return binary.AppendVarint(append(dst, entryExpire), cutoff)
}

func appendPurgeEntry(dst []byte, token uint64, req []byte) []byte {
	dst = binary.AppendUvarint(append(dst, entryPurge), token)
	return append(dst, req...)
}

func decodePurgeEntry(b []byte) (token uint64, req streamapi.PurgeRequest, err error) {
	if len(b) == 0 || b[0] != entryPurge {
		return 0, req, fmt.Errorf("%w: not a purge", errBadEntry)
	}
	token, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return 0, req, fmt.Errorf("%w: purge token", errBadEntry)
	}
	if err := json.Unmarshal(b[1+n:], &req); err != nil {
		return 0, req, fmt.Errorf("%w: purge request: %v", errBadEntry, err)
	}
	return token, req, nil
}

// applyPurge applies a purge entry and hands its count to its proposer.
func (m *partitionMachine) applyPurge(b []byte) error {
	token, req, err := decodePurgeEntry(b)
	if err != nil {
		return err
	}
	n, perr := purgeLog(m.log, req)
	if m.purged != nil {
		m.purged(token, n, perr)
	}
	return nil // a refused purge is the proposer's answer, alike on every replica
}

// purgeReplicated purges every partition through its group and returns what this
// node's replica removed once it applied the purges.
func (s *Stream) purgeReplicated(req streamapi.PurgeRequest) (uint64, error) {
	body, _ := json.Marshal(req)
	var total uint64
	for p := range s.repl.groups {
		if req.Partition != nil && *req.Partition != p {
			continue
		}
		n, err := s.purgePartition(p, body)
		total += n
		if err != nil {
			return total, err
		}
	}
	s.cmu.RLock()
	for _, c := range s.consumers {
		c.purged()
	}
	s.cmu.RUnlock()
	return total, nil
}

// purgePartition purges partition p through its group.
func (s *Stream) purgePartition(p int, req []byte) (uint64, error) {
	r := s.repl
	token := r.tokenBase | 1<<31 | r.purgeSeq.Add(1)&0x7fffffff
	r.mu.Lock()
	r.purges[token] = nil
	r.mu.Unlock()
	err := s.proposeTo(p, appendPurgeEntry(nil, token, req))
	r.mu.Lock()
	res := r.purges[token]
	delete(r.purges, token)
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if res == nil {
		return 0, fmt.Errorf("stream %q: partition %d: purge applied without a result", s.name, p)
	}
	if res.err != nil {
		return res.n, fmt.Errorf("stream %q: partition %d: purge: %w", s.name, p, res.err)
	}
	return res.n, nil
}

// purgeResult is what applying a purge gave, for its proposer.
type purgeResult struct {
	n   uint64
	err error
}

func (r *streamRepl) purgeApplied(token uint64, n uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.purges[token]; ok {
		r.purges[token] = &purgeResult{n: n, err: err}
	}
}

// decodeRemoval decodes a delete entry into seqs (reusing its array) or an expire
// entry into cutoff.
func decodeRemoval(b []byte, seqs []uint64) (op byte, _ []uint64, cutoff int64, err error) {
	if len(b) == 0 {
		return 0, seqs, 0, fmt.Errorf("%w: empty", errBadEntry)
	}
	op, b = b[0], b[1:]
	switch op {
	case entryDelete:
		count, n := binary.Uvarint(b)
		if n <= 0 || count > maxDeleteSeqs || count > uint64(len(b)) {
			return op, seqs, 0, fmt.Errorf("%w: delete count", errBadEntry)
		}
		b = b[n:]
		seqs = seqs[:0]
		for range count {
			s, n := binary.Uvarint(b)
			if n <= 0 {
				return op, seqs, 0, fmt.Errorf("%w: delete sequence", errBadEntry)
			}
			seqs = append(seqs, s)
			b = b[n:]
		}
	case entryExpire:
		var n int
		if cutoff, n = binary.Varint(b); n <= 0 {
			return op, seqs, 0, fmt.Errorf("%w: expire cutoff", errBadEntry)
		}
		b = b[n:]
	default:
		return op, seqs, 0, fmt.Errorf("%w: unknown op %d", errBadEntry, op)
	}
	if len(b) != 0 {
		return op, seqs, 0, fmt.Errorf("%w: %d bytes after a removal", errBadEntry, len(b))
	}
	return op, seqs, cutoff, nil
}

// applyRemoval applies a delete or expire entry to the replica's log.
func (m *partitionMachine) applyRemoval(b []byte) error {
	op, seqs, cutoff, err := decodeRemoval(b, m.delSeqs)
	m.delSeqs = seqs[:0]
	if err != nil {
		return err
	}
	if op == entryExpire {
		_, err = m.log.ExpireBefore(cutoff)
	} else {
		_, err = m.log.DeleteMany(seqs)
	}
	if err != nil {
		return fmt.Errorf("stream replica: removing messages: %w", err)
	}
	return nil
}

// replicateRemovals proposes what the leader's writer found to remove, one entry
// per partition: deleted messages of a work queue, messages of an interest stream
// every consumer is done with. A proposal that fails leaves them: the next leader's
// consumers decide again.
func (s *Stream) replicateRemovals(dels []partSeq, checks []partSeq) {
	if len(dels) == 0 && len(checks) == 0 {
		return
	}
	done := s.interestDone(checks)
	for p := range s.parts {
		seqs := s.delSeqs[:0]
		for _, d := range dels {
			if d.part == p {
				seqs = append(seqs, d.seq)
			}
		}
		for _, k := range done {
			if k.part == p {
				seqs = append(seqs, k.seq)
			}
		}
		s.delSeqs = seqs
		if len(seqs) == 0 {
			continue
		}
		if err := s.proposeRemoval(p, appendDeleteEntry(nil, seqs)); err != nil {
			s.m.log.Warn("removing acknowledged messages", "stream", s.name, "partition", p, "messages", len(seqs), "err", err)
		}
	}
}

// expireReplicated proposes, on the leader, removing what is older than max_age by
// its clock.
func (s *Stream) expireReplicated() {
	maxAge := time.Duration(s.Config().MaxAge)
	if maxAge <= 0 || !s.repl.leader.Load() {
		return
	}
	cutoff := time.Now().Add(-maxAge).UnixNano()
	for p, l := range s.parts {
		if st := l.State(); st.Msgs == 0 || st.FirstTime >= cutoff {
			continue
		}
		if err := s.proposeRemoval(p, appendExpireEntry(nil, cutoff)); err != nil {
			s.m.log.Warn("stream age limit", "stream", s.name, "partition", p, "err", err)
		}
	}
}

func (s *Stream) proposeRemoval(p int, entry []byte) error {
	if !s.repl.leader.Load() {
		return nil
	}
	return s.proposeTo(p, entry)
}
