package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tern-mq/tern/internal/store"
)

// A durable consumer's position is a snapshot (state.json) plus a journal of what
// happened since: deliveries, acks and cursor moves. The delivery goroutine appends
// records to a buffer and writes the buffer with one write per wake-up, in chunks
// framed as
//
//	u32 length | u32 CRC32C of the records | records
//
// so that a chunk torn by a crash is recognised and dropped on replay. Each record is
// a type byte followed by uvarints. Replaying a record twice gives the same state,
// which makes the snapshot-then-truncate compaction safe at any crash point.
const (
	recDelivered = 'D' // partition, seq, deliveries: the message is pending
	recAcked     = 'A' // partition, seq: no longer pending
	recAckedUpTo = 'L' // partition, seq: nothing up to seq is pending
	recNext      = 'N' // partition, next: first delivery has passed everything below next
	recConsSeq   = 'C' // consumer sequence, redelivered count
)

// compactAt is the journal size at which a snapshot replaces it.
const compactAt = 8 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type journal struct {
	path     string
	f        *os.File
	buf      []byte // records not yet written; guarded by the consumer's lock
	size     int64
	sync     store.SyncPolicy
	interval time.Duration
	lastSync time.Time
	dirty    bool // written since the last fsync
}

// consumerState is the snapshot of a durable consumer's position.
type consumerState struct {
	ConsumerSeq uint64      `json:"consumer_seq"`
	Redelivered uint64      `json:"redelivered"`
	Parts       []partState `json:"partitions"`
}

type partState struct {
	Next    uint64      `json:"next"`
	Pending [][2]uint64 `json:"pending,omitempty"` // seq, deliveries
}

func (j *journal) add(typ byte, vals ...uint64) {
	j.buf = append(j.buf, typ)
	for _, v := range vals {
		j.buf = binary.AppendUvarint(j.buf, v)
	}
}

// flush writes the buffered records as one chunk and fsyncs per the policy.
func (j *journal) flush(records []byte) error {
	if len(records) > 0 {
		var hdr [8]byte
		binary.LittleEndian.PutUint32(hdr[0:], uint32(len(records)))
		binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(records, crcTable))
		chunk := append(hdr[:], records...)
		if _, err := j.f.Write(chunk); err != nil {
			// A torn chunk would hide every later one from recovery: cut it off,
			// so that the retry appends where the journal ended.
			if terr := j.f.Truncate(j.size); terr == nil {
				_, _ = j.f.Seek(j.size, io.SeekStart)
			}
			return fmt.Errorf("consumer journal %s: %w", j.path, err)
		}
		j.size += int64(len(chunk))
		j.dirty = true
	}
	if !j.dirty {
		return nil
	}
	switch j.sync {
	case store.SyncAlways:
	case store.SyncInterval:
		if time.Since(j.lastSync) < j.interval {
			return nil
		}
	default:
		return nil
	}
	j.lastSync = time.Now()
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("consumer journal %s: %w", j.path, err)
	}
	j.dirty = false
	return nil
}

// reset empties the journal after a snapshot made it redundant.
func (j *journal) reset() error {
	if err := j.f.Truncate(0); err != nil {
		return err
	}
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	j.size = 0
	return nil
}

func (j *journal) close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Sync()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	return err
}

// openJournal loads the snapshot in dir and replays the journal over it, truncating a
// torn tail. parts is the stream's partition count.
func openJournal(dir string, parts int, sync store.SyncPolicy, interval time.Duration) (*journal, consumerState, error) {
	var st consumerState
	if err := readJSON(filepath.Join(dir, "state.json"), &st); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, st, err
	}
	for len(st.Parts) < parts {
		st.Parts = append(st.Parts, partState{})
	}
	path := filepath.Join(dir, "journal")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, st, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, st, err
	}
	good := replayJournal(data, &st)
	if good < len(data) {
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			return nil, st, err
		}
	}
	if _, err := f.Seek(int64(good), io.SeekStart); err != nil {
		f.Close()
		return nil, st, err
	}
	return &journal{path: path, f: f, size: int64(good), sync: sync, interval: interval, lastSync: time.Now()}, st, nil
}

// replayJournal applies every intact chunk of data to st and returns the length of
// the intact prefix.
func replayJournal(data []byte, st *consumerState) int {
	pending := make([]map[uint64]uint64, len(st.Parts))
	for i, p := range st.Parts {
		pending[i] = make(map[uint64]uint64, len(p.Pending))
		for _, e := range p.Pending {
			pending[i][e[0]] = e[1]
		}
	}
	off := 0
	for len(data)-off >= 8 {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n > len(data)-off-8 {
			break
		}
		recs := data[off+8 : off+8+n]
		// A chunk applies whole or not at all: checked first, then applied, so a
		// chunk refused halfway leaves no trace in the state.
		if crc32.Checksum(recs, crcTable) != sum || !applyRecords(recs, st, nil) {
			break
		}
		applyRecords(recs, st, pending)
		off += 8 + n
	}
	for i := range st.Parts {
		st.Parts[i].Pending = st.Parts[i].Pending[:0]
		for seq, d := range pending[i] {
			st.Parts[i].Pending = append(st.Parts[i].Pending, [2]uint64{seq, d})
		}
	}
	return off
}

// applyRecords applies the records of one chunk; with pending nil it only checks that
// every record is well formed and names an existing partition.
func applyRecords(b []byte, st *consumerState, pending []map[uint64]uint64) bool {
	next := func(n int) ([3]uint64, bool) {
		var v [3]uint64
		for i := 0; i < n; i++ {
			x, k := binary.Uvarint(b)
			if k <= 0 {
				return v, false
			}
			v[i] = x
			b = b[k:]
		}
		return v, true
	}
	for len(b) > 0 {
		typ := b[0]
		b = b[1:]
		var v [3]uint64
		var ok bool
		switch typ {
		case recDelivered:
			v, ok = next(3)
		case recAcked, recAckedUpTo, recNext, recConsSeq:
			v, ok = next(2)
		default:
			return false
		}
		if !ok {
			return false
		}
		if typ == recConsSeq {
			if pending != nil {
				st.ConsumerSeq, st.Redelivered = max(st.ConsumerSeq, v[0]), max(st.Redelivered, v[1])
			}
			continue
		}
		if v[0] >= uint64(len(st.Parts)) {
			return false
		}
		if pending == nil {
			continue
		}
		p := int(v[0])
		switch typ {
		case recDelivered:
			pending[p][v[1]] = v[2]
			st.Parts[p].Next = max(st.Parts[p].Next, v[1]+1)
		case recAcked:
			delete(pending[p], v[1])
		case recAckedUpTo:
			for seq := range pending[p] {
				if seq <= v[1] {
					delete(pending[p], seq)
				}
			}
		case recNext:
			st.Parts[p].Next = max(st.Parts[p].Next, v[1])
		}
	}
	return true
}
