package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// segment is one file of the log, holding the records base..last in order.
// A segment's sequences are consecutive: a record never moves, and deletion only
// marks it dead (in memory and in the .del file) until the whole file goes.
type segment struct {
	base    uint64
	logPath string
	f       *os.File // shared by readers (pread); also written through when active

	// Guarded by Log.mu: the writer changes them under the write lock.
	size      int64  // committed bytes; readers never look past it
	last      uint64 // base-1 while empty
	index     []indexEntry
	tmax      int64  // largest record Time
	born      int64  // Time of its first record; 0 while empty (Config.SegmentAge)
	dels      delSet // interior tombstones
	dead      uint64 // dead sequences in base..last (deleted, purged, expired)
	holed     uint64 // dead sequences when Clean last rewrote it (Open: those in holes)
	liveBytes int64  // record bytes of its live messages (damaged ranges included)
	sealed    bool   // no longer the active segment
	removed   bool   // files closed and unlinked

	// Writer only.
	ib         indexBuilder
	delf       *os.File
	delSize    int64
	delEntries int
}

func segName(base uint64) string { return fmt.Sprintf("%020d", base) }

// parseSegName splits "00000000000000000042.log" into 42 and ".log".
func parseSegName(name string) (uint64, string, bool) {
	ext := filepath.Ext(name)
	stem := strings.TrimSuffix(name, ext)
	if len(stem) != 20 {
		return 0, "", false
	}
	base, err := strconv.ParseUint(stem, 10, 64)
	if err != nil || base == 0 {
		return 0, "", false
	}
	return base, ext, true
}

func newSegment(dir string, base uint64) *segment {
	return &segment{
		base:    base,
		logPath: filepath.Join(dir, segName(base)+".log"),
		last:    base - 1,
		tmax:    minTime,
		ib:      newIndexBuilder(),
	}
}

func (s *segment) idxPath() string { return strings.TrimSuffix(s.logPath, ".log") + ".idx" }
func (s *segment) delPath() string { return strings.TrimSuffix(s.logPath, ".log") + ".del" }

func (s *segment) count() uint64 { return s.last + 1 - s.base }
func (s *segment) live() uint64  { return s.count() - s.dead }

func (s *segment) contains(seq uint64) bool { return seq >= s.base && seq <= s.last }

// removeFiles unlinks the segment's .log, .idx and .del files, the .log first
// (Open drops the others of a segment whose .log is gone).
func (s *segment) removeFiles() {
	os.Remove(s.logPath)
	os.Remove(s.idxPath())
	os.Remove(s.delPath())
}

func (s *segment) closeFiles() {
	if s.f != nil {
		s.f.Close()
	}
	if s.delf != nil {
		s.delf.Close()
		s.delf = nil
	}
}
