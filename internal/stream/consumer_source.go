package stream

import (
	"errors"
	"io"

	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream/consumer"
	"github.com/tern-mq/tern/internal/subject"
)

// source reads the stream for a consumer's machine (consumer.Source), keeping a
// reader open where the consumer stands in each partition, and counts what a
// filtered consumer has yet to go through. Guarded by the consumer's lock.
type source struct {
	c       *Consumer
	parts   []sourcePart
	lastSeq []uint64 // each partition's last sequence when the pass began
	rbuf    []byte
}

type sourcePart struct {
	reader     *store.Reader
	readerNext uint64 // where reader stands; 0 when there is none

	// What a filtered consumer has yet to go through: counted live messages
	// matching the filter in [countFrom, countTo], countFrom following the
	// consumer's position as it reads. Counted again from scratch when the
	// position moves otherwise, or when the log removed a matching message at or
	// above checkedFrom (the lowest countFrom since the last look at removals):
	// the consumer may have skipped a counted message that was removed before it
	// got there.
	counted            bool
	countFrom, countTo uint64
	checkedFrom        uint64
	matching           uint64
	removals           *store.RemovalWatch
}

// refresh notes where each partition ends: a pass delivers up to there.
func (s *source) refresh() {
	for i, l := range s.c.s.parts {
		s.lastSeq[i] = l.State().LastSeq
	}
}

func (s *source) close() {
	for i := range s.parts {
		p := &s.parts[i]
		if p.reader != nil {
			p.reader.Close()
			p.reader = nil
		}
		if p.removals != nil {
			p.removals.Stop()
			p.removals = nil
		}
	}
}

// Next implements consumer.Source.
func (s *source) Next(i int, seq uint64) (consumer.Msg, uint64, bool) {
	c := s.c
	p := &s.parts[i]
	if seq > s.lastSeq[i] {
		return consumer.Msg{}, seq, false
	}
	if p.reader == nil || p.readerNext != seq {
		if p.reader != nil {
			p.reader.Close()
		}
		p.reader = c.s.parts[i].NewReader(seq)
		p.readerNext = seq
	}
	pos := seq
	for skipped := 0; skipped < 4096; skipped++ {
		rec, err := p.reader.Next()
		if err == io.EOF {
			return consumer.Msg{}, pos, false
		}
		if err != nil {
			var corr *store.Corruption
			if errors.As(err, &corr) && corr.LastSeq >= pos {
				c.s.m.log.Error("consumer skips corrupt messages", "stream", c.s.name, "consumer", c.name,
					"partition", i, "first", corr.FirstSeq, "last", corr.LastSeq, "err", err)
				p.readerNext = 0
				return consumer.Msg{}, corr.LastSeq + 1, false
			}
			c.s.m.log.Error("consumer read", "stream", c.s.name, "consumer", c.name, "partition", i, "err", err)
			p.readerNext = 0
			return consumer.Msg{}, pos, false
		}
		prev := pos
		pos = rec.Seq + 1
		p.readerNext = pos
		matched := c.filter == "" || subject.Matches(c.filter, string(rec.Subject))
		if p.counted && p.countFrom == prev {
			switch {
			case rec.Seq > p.countTo: // nothing counted was left before it
				p.matching, p.countTo = 0, rec.Seq
			case matched:
				p.matching--
			}
			p.countFrom = pos
		}
		if matched {
			return consumer.Msg{Seq: rec.Seq, Subject: rec.Subject, Header: rec.Header, Payload: rec.Payload, Time: rec.Time}, pos, true
		}
	}
	return consumer.Msg{}, pos, false
}

// Read implements consumer.Source.
func (s *source) Read(i int, seq uint64) (consumer.Msg, bool) {
	rec, buf, err := s.c.s.parts[i].Read(seq, s.rbuf)
	s.rbuf = buf
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.c.s.m.log.Error("consumer read", "stream", s.c.s.name, "consumer", s.c.name, "partition", i, "seq", seq, "err", err)
		}
		return consumer.Msg{}, false
	}
	return consumer.Msg{Seq: rec.Seq, Subject: rec.Subject, Header: rec.Header, Payload: rec.Payload, Time: rec.Time}, true
}

// numPendingLocked is how many messages the consumer has yet to go through for a
// first delivery: the live messages from its position on that pass its filter.
func (c *Consumer) numPendingLocked() uint64 {
	var n uint64
	for i := range c.src.parts {
		next := c.m.Position(i)
		if c.filter == "" {
			n += c.s.parts[i].CountFrom(next)
		} else {
			n += c.src.matching(i, next)
		}
		n += uint64(c.m.Backlog(i))
	}
	return n
}

// matching counts the live messages of partition i from next on that match the
// filter: what it counted before, kept up to date as the consumer read, plus what
// has been appended since; all again when that no longer holds.
func (s *source) matching(i int, next uint64) uint64 {
	c := s.c
	p := &s.parts[i]
	l := c.s.parts[i]
	if p.removals == nil && !c.closed {
		filter := c.filter
		p.removals = l.WatchRemovals(func(subj []byte) bool { return subject.Matches(filter, string(subj)) })
		p.counted = false
	}
	if p.removals != nil {
		if high := p.removals.Take(); high != 0 && high >= p.checkedFrom {
			p.counted = false
		}
	}
	if p.countFrom != next || p.removals == nil {
		p.counted = false
	}
	from := p.countTo + 1
	if !p.counted {
		p.countFrom, p.countTo, p.matching = next, next-1, 0
		from = next
	}
	p.checkedFrom = p.countFrom
	end := l.State().LastSeq
	if end < from {
		p.counted = true
		return p.matching
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
			p.counted = false
			return p.matching
		}
		if rec.Seq > end {
			break
		}
		if subject.Matches(c.filter, string(rec.Subject)) {
			p.matching++
		}
	}
	p.countTo, p.counted = end, true
	return p.matching
}
