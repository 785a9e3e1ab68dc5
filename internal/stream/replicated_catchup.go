package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tern-mq/tern/internal/store"
)

// Catching up. A replica whose log ends before the snapshot its group sends it (it
// was away while the others compacted their Raft logs past what it has) fetches
// the messages it misses from the group's leader, which reads them from its own
// log. An answer to a fetch (entryRecords), integers unsigned varints unless said:
//
//	op (1 byte, 2)  last  count
//	count times: seq  time (zig-zag varint, Unix ns)  subject  header  payload
//
// last is the leader's last sequence when it read; subject, header and payload are
// each a length then bytes. Records come in sequence order from the first live one
// at or after the sequence asked for.
const entryRecords byte = 2

// Limits of a fetch answer.
const (
	// FetchBytes is about how much one answer carries (one record more if it is
	// larger alone): well under a route frame.
	FetchBytes      = 4 << 20
	maxFetchRecords = 1 << 20
	// catchUpTimeout bounds a whole catch-up; FetchTimeout one answer.
	catchUpTimeout = 2 * time.Minute
	FetchTimeout   = 5 * time.Second
)

// Fetcher asks the leader of a replica's group for its records from seq on (an
// answer ReadRecords made).
type Fetcher func(ctx context.Context, from uint64) ([]byte, error)

// ReadRecords encodes partition part's records from seq on, about maxBytes of them,
// for a replica catching up (see Fetcher).
func (s *Stream) ReadRecords(part int, from uint64, maxBytes int) ([]byte, error) {
	if part < 0 || part >= len(s.parts) {
		return nil, fmt.Errorf("stream %q: %w: no partition %d", s.name, ErrBadConfig, part)
	}
	b, err := readRecords(s.parts[part], from, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("stream %q: partition %d: %w", s.name, part, err)
	}
	return b, nil
}

func readRecords(l *store.Log, from uint64, maxBytes int) ([]byte, error) {
	out := []byte{entryRecords}
	out = binary.AppendUvarint(out, l.State().LastSeq)
	var body []byte
	count := 0
	r := l.NewReader(from)
	defer r.Close()
	for len(body) < maxBytes && count < maxFetchRecords {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading from %d: %w", from, err)
		}
		body = binary.AppendUvarint(body, rec.Seq)
		body = binary.AppendVarint(body, rec.Time)
		for _, b := range [3][]byte{rec.Subject, rec.Header, rec.Payload} {
			body = appendField(body, b)
		}
		count++
	}
	out = binary.AppendUvarint(out, uint64(count))
	return append(out, body...), nil
}

// fetchedRecords is a decoded fetch answer; next walks its records.
type fetchedRecords struct {
	last  uint64
	count int
	rest  []byte
}

func decodeRecords(b []byte) (fetchedRecords, error) {
	var f fetchedRecords
	if len(b) == 0 || b[0] != entryRecords {
		return f, fmt.Errorf("%w: not a fetch answer", errBadEntry)
	}
	b = b[1:]
	var n int
	if f.last, n = binary.Uvarint(b); n <= 0 {
		return f, fmt.Errorf("%w: last sequence", errBadEntry)
	}
	b = b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxFetchRecords {
		return f, fmt.Errorf("%w: record count", errBadEntry)
	}
	f.count, f.rest = int(count), b[n:]
	return f, nil
}

func (f *fetchedRecords) next() (store.Record, bool, error) {
	var rec store.Record
	if f.count == 0 {
		if len(f.rest) != 0 {
			return rec, false, fmt.Errorf("%w: %d bytes after the last record", errBadEntry, len(f.rest))
		}
		return rec, false, nil
	}
	var n int
	if rec.Seq, n = binary.Uvarint(f.rest); n <= 0 || rec.Seq == 0 {
		return rec, false, fmt.Errorf("%w: record sequence", errBadEntry)
	}
	f.rest = f.rest[n:]
	if rec.Time, n = binary.Varint(f.rest); n <= 0 {
		return rec, false, fmt.Errorf("%w: record time", errBadEntry)
	}
	f.rest = f.rest[n:]
	var err error
	if f.rest, err = readFields(f.rest, "record", &rec.Subject, &rec.Header, &rec.Payload); err != nil {
		return rec, false, err
	}
	f.count--
	return rec, true, nil
}

// catchUp fetches and stores the records up to sequence to that the log misses.
// Records the leader no longer has (removed by its limits) are skipped: the log
// starts again after them, as the leader's does.
func (m *partitionMachine) catchUp(to uint64) error {
	deadline := time.Now().Add(catchUpTimeout)
	var lastErr error
	for {
		next := m.log.State().LastSeq + 1
		if next > to {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("catching up from %d to %d: %w", next, to, lastErr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), FetchTimeout)
		b, err := m.fetch(ctx, next)
		cancel()
		if err == nil {
			err = m.storeFetched(b, next, to)
		}
		if err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// storeFetched appends the records of one fetch answer up to sequence to.
func (m *partitionMachine) storeFetched(b []byte, next, to uint64) error {
	f, err := decodeRecords(b)
	if err != nil {
		return err
	}
	if f.last < next && f.count == 0 {
		return fmt.Errorf("the leader's log ends at %d, before %d", f.last, next)
	}
	stored := 0
	for {
		rec, ok, err := f.next()
		if err != nil {
			return err
		}
		if !ok || rec.Seq > to {
			break
		}
		if rec.Seq < next {
			continue
		}
		if rec.Seq > next {
			// The leader removed what comes before: so does this log.
			if stored > 0 {
				if err := m.log.Commit(); err != nil {
					return err
				}
			}
			if err := m.log.Reset(rec.Seq); err != nil {
				return fmt.Errorf("skipping to %d: %w", rec.Seq, err)
			}
		}
		got, err := m.log.Append(rec.Subject, rec.Header, rec.Payload, rec.Time)
		if err != nil {
			m.log.Rollback()
			return err
		}
		if got != rec.Seq {
			m.log.Rollback()
			return fmt.Errorf("record %d stored at %d", rec.Seq, got)
		}
		next = rec.Seq + 1
		stored++
	}
	if stored == 0 && next <= to {
		if f.last >= to && f.count == 0 {
			// Nothing left from next to to: the leader removed it all.
			return m.log.Reset(to + 1)
		}
		return fmt.Errorf("no record from %d in the leader's answer", next)
	}
	return m.log.Commit()
}
