package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tern-mq/tern/internal/header"
	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/streamapi"
)

// Compacted streams (streamapi.StreamConfig.Compact): each partition's log
// knows its messages' keys (store.Config.Keys) and removes those a newer
// message of their key superseded. The writer's tick decides how far: on one
// node it compacts the logs itself; in a replicated stream the leader
// proposes the bounds, and every replica removes the same messages from its
// log when it applies them.
//
//	op 11 (compact)  bound  tombstone bound (uvarints): store.Log.Compact's
//
// Where compaction leaves old segments mostly dead, each replica rewrites them
// without their dead records, one at a time, on a goroutine beside the log's
// writer (store.Log.CleanAside), which only swaps each finished rewrite in: a
// purely local matter, as the records stay the same.
const entryCompact byte = 11

// cleanDirty is how much of a segment must be removed records for it to be
// rewritten: Kafka's min.cleanable.dirty.ratio default.
const cleanDirty = 0.5

// compactionKey says what a message is compacted by: its Tern-Key header, or
// its subject when it has none.
func compactionKey(subject, hdr []byte) store.Keyed {
	h := header.Block(hdr)
	key, keyed, _, null := h.LookupPair(streamapi.HeaderKey, streamapi.HeaderNullValue)
	if keyed {
		return store.Keyed{Space: store.KeyedBy, Key: key, Tombstone: null}
	}
	return store.Keyed{Space: store.KeyedBySubject, Tombstone: null}
}

// compactBounds are the bounds the stream's configuration gives partition p
// now.
func (s *Stream) compactBounds(c *streamapi.Compaction, p int) (bound, tombBound uint64) {
	return s.parts[p].CompactBounds(time.Duration(c.MinLag), time.Duration(c.TombstoneRetention))
}

// compact removes what compaction allows from each partition (the writer's
// tick); on a replicated stream's leader it proposes the bounds that moved.
func (s *Stream) compact() {
	if s.repl != nil {
		for _, m := range s.repl.machines {
			m.finishCleaning()
		}
	}
	c := s.Config().Compaction()
	switch {
	case s.repl != nil:
		if c != nil {
			s.proposeCompaction(c)
		}
	case c == nil:
		// Compaction was switched off: a rewrite it started is swapped in,
		// and none started.
		for p, l := range s.parts {
			if l.Cleaning() {
				st, err := l.FinishCleaning()
				logCleaned(s.m.log, st, err, "stream", s.name, "partition", p)
			}
		}
	default:
		for p, l := range s.parts {
			if bound, tombBound := s.compactBounds(c, p); l.CompactDue(bound, tombBound) {
				if _, err := l.Compact(bound, tombBound); err != nil {
					s.m.log.Error("stream compaction", "stream", s.name, "partition", p, "err", err)
				}
			}
		}
		s.cleanPartsOf(c)
	}
}

// cleanParts goes on rewriting a single node's compacted partitions each
// time a rewrite is done.
func (s *Stream) cleanParts() { s.cleanPartsOf(s.Config().Compaction()) }

// cleanPartsOf is cleanParts with the stream's compaction settings at hand
// (nil: compaction is off).
func (s *Stream) cleanPartsOf(c *streamapi.Compaction) {
	if s.repl != nil || c == nil {
		return
	}
	for p, l := range s.parts {
		clean(l, s.signalCleaned, s.m.log, "stream", s.name, "partition", p)
	}
}

// signalCleaned wakes the writer for a finished rewrite (cleanParts); a
// signal already pending does for it.
func (s *Stream) signalCleaned() {
	select {
	case s.cleaned <- struct{}{}:
	default:
	}
}

// clean swaps in the rewrite of a compacted partition's mostly dead segment
// that the last call started, if it is done, and starts the next
// (store.Log.CleanAside), which calls done when it is written; a failure
// leaves the segment as it was and is logged, with attrs naming the
// partition.
func clean(l *store.Log, done func(), log *slog.Logger, attrs ...any) {
	st, err := l.CleanAside(cleanDirty, done)
	logCleaned(log, st, err, attrs...)
}

// logCleaned logs what a rewrite did, or why it failed.
func logCleaned(log *slog.Logger, st store.CleanStats, err error, attrs ...any) {
	if err != nil {
		log.Error("stream compaction: rewriting segments", append(attrs, "err", err)...)
		return
	}
	if st.Segments > 0 {
		log.Debug("stream compaction: segments rewritten", append(attrs,
			"segments", st.Segments, "bytes_before", st.Before, "bytes_after", st.After)...)
	}
}

// proposeCompaction proposes, on the leader, the bounds of each partition that
// moved since it last proposed them; the replicas' logs (the machines') are
// not the writer's to read, so it cannot ask whether anything is due.
func (s *Stream) proposeCompaction(c *streamapi.Compaction) {
	if !s.repl.leader.Load() {
		s.compacted = nil
		return
	}
	if len(s.compacted) != len(s.parts) {
		s.compacted = make([][2]uint64, len(s.parts))
	}
	for p := range s.parts {
		bound, tombBound := s.compactBounds(c, p)
		if was := s.compacted[p]; bound <= was[0] && tombBound <= was[1] {
			continue
		}
		if err := s.proposeRemoval(p, appendCompactEntry(nil, bound, tombBound)); err != nil {
			s.m.log.Warn("stream compaction", "stream", s.name, "partition", p, "err", err)
			continue
		}
		s.compacted[p] = [2]uint64{bound, tombBound}
	}
}

func appendCompactEntry(dst []byte, bound, tombBound uint64) []byte {
	dst = binary.AppendUvarint(append(dst, entryCompact), bound)
	return binary.AppendUvarint(dst, tombBound)
}

func decodeCompactEntry(b []byte) (bound, tombBound uint64, err error) {
	if len(b) == 0 || b[0] != entryCompact {
		return 0, 0, fmt.Errorf("%w: not a compaction", errBadEntry)
	}
	b = b[1:]
	bound, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, fmt.Errorf("%w: compaction bound", errBadEntry)
	}
	b = b[n:]
	if tombBound, n = binary.Uvarint(b); n <= 0 || n != len(b) {
		return 0, 0, fmt.Errorf("%w: compaction tombstone bound", errBadEntry)
	}
	return bound, tombBound, nil
}

// applyCompaction applies a compact entry to the replica's log. A log opened
// without keys (the entry of a stream whose compaction could not have been
// turned on: it cannot change) has nothing to do.
func (m *partitionMachine) applyCompaction(b []byte) error {
	bound, tombBound, err := decodeCompactEntry(b)
	if err != nil {
		return err
	}
	_, err = m.log.Compact(bound, tombBound)
	if errors.Is(err, store.ErrNotCompacted) {
		// Compaction was switched on since the log was opened: every
		// replica learns the keys at this same entry, from the same records.
		if err = m.log.SetKeys(compactionKey); err == nil {
			_, err = m.log.Compact(bound, tombBound)
		}
	}
	if err != nil {
		return fmt.Errorf("stream replica: compacting: %w", err)
	}
	clean(m.log, m.finishCleaning, m.logger)
	return nil
}
