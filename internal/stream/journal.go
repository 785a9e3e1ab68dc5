package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/store"
	"github.com/tern-mq/tern/internal/stream/consumer"
)

// A durable consumer's position is a snapshot (state.json) plus a journal of what
// happened since: deliveries, acks and cursor moves. The delivery goroutine appends
// records to a buffer and writes the buffer with one write per wake-up, in chunks
// framed as
//
//	u32 length | u32 CRC32C of the records | records
//
// so that a chunk torn by a crash is recognised and dropped on replay. The records
// and their meaning belong to package consumer (consumer.Replay).

// compactAt is the journal size at which a snapshot replaces it.
const compactAt = 8 << 20

// syncHook, when set, replaces a journal's fsync: tests slow it down to show who
// waits for it.
var syncHook atomic.Pointer[func(*os.File) error]

func syncJournal(f *os.File) error {
	if h := syncHook.Load(); h != nil {
		return (*h)(f)
	}
	return f.Sync()
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type journal struct {
	path     string
	f        *os.File
	size     int64
	sync     store.SyncPolicy
	interval time.Duration
	lastSync time.Time
	dirty    bool // written since the last fsync
}

// flush writes records as one chunk and fsyncs per the policy.
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
	if err := syncJournal(j.f); err != nil {
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
func openJournal(dir string, parts int, sync store.SyncPolicy, interval time.Duration) (*journal, consumer.State, error) {
	var st consumer.State
	if err := readJSON(filepath.Join(dir, "state.json"), &st); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, st, err
	}
	for len(st.Parts) < parts {
		st.Parts = append(st.Parts, consumer.PartState{})
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
func replayJournal(data []byte, st *consumer.State) int {
	var chunks [][]byte
	var ends []int
	off := 0
	for len(data)-off >= 8 {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n > len(data)-off-8 {
			break
		}
		recs := data[off+8 : off+8+n]
		if crc32.Checksum(recs, crcTable) != sum {
			break
		}
		chunks = append(chunks, recs)
		off += 8 + n
		ends = append(ends, off)
	}
	if applied := consumer.Replay(st, chunks); applied > 0 {
		return ends[applied-1]
	}
	return 0
}
