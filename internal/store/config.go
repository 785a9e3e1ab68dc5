package store

import (
	"fmt"
	"os"
	"time"
)

// SyncPolicy says when appended data is forced to stable storage.
type SyncPolicy int

const (
	SyncInterval SyncPolicy = iota // default: write(2) per commit, fsync every Config.SyncInterval
	SyncAlways                     // fsync before Commit returns
	SyncNever                      // never fsync explicitly; the OS writes back
)

// ParseSyncPolicy parses "interval", "always" or "never" ("" means interval).
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "interval", "":
		return SyncInterval, nil
	case "always":
		return SyncAlways, nil
	case "never":
		return SyncNever, nil
	}
	return SyncInterval, fmt.Errorf("store: unknown sync policy %q (want interval, always or never)", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncInterval:
		return "interval"
	case SyncAlways:
		return "always"
	case SyncNever:
		return "never"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Discard says what happens when a limit is reached.
type Discard int

const (
	DiscardOld Discard = iota // limits reached: remove the oldest messages
	DiscardNew                // limits reached: refuse the append with ErrFull
)

func (d Discard) String() string {
	if d == DiscardNew {
		return "new"
	}
	return "old"
}

const (
	DefaultSegmentBytes = 64 << 20
	DefaultIndexEvery   = 4096
	DefaultSyncInterval = 100 * time.Millisecond

	// A segment's offsets are stored in 32 bits.
	maxSegmentBytes = maxRecord
	minSegmentBytes = 128
)

// Config configures one log. The zero values of the optional fields pick the
// defaults noted.
type Config struct {
	Dir          string           // directory owned by this log; created if missing
	Name         string           // used in errors and reports, e.g. "orders" or "orders/2"
	SegmentBytes int64            // roll to a new segment at this size; default 64 MiB
	IndexEvery   int              // bytes of records between sparse index entries; default 4096
	Sync         SyncPolicy       // when data is fsynced; default SyncInterval
	SyncInterval time.Duration    // default 100ms
	OwnerSyncs   bool             // SyncInterval without a goroutine of the log's own: the owner calls Sync (with files of its own)
	MaxAge       time.Duration    // 0 = unlimited
	MaxBytes     int64            // 0 = unlimited
	MaxMsgs      uint64           // 0 = unlimited
	Discard      Discard          // what reaching MaxMsgs or MaxBytes does; default DiscardOld
	Compression  Compression      // how commits are written; default CompressNone (blocks are read whatever it says)
	Now          func() time.Time // nil = time.Now; tests pass a fake clock
	// SegmentAge, when set, also rolls to a new segment at the first append
	// after the active segment's first record is this old: a compacted log's
	// head is never compacted, so a quiet one needs it to be.
	SegmentAge time.Duration
	// Keys, when set, makes the log compacted: it says each record's key, and
	// Compact removes the records a later one of their key superseded (compact.go).
	Keys func(subject, header []byte) Keyed

	hooks *testHooks // set only by this package's tests
}

// testHooks let tests observe fsyncs and inject failures without timing.
type testHooks struct {
	fsync func(f *os.File) error // replaces f.Sync when set
}

func (c *Config) setDefaults() error {
	if c.Dir == "" {
		return fmt.Errorf("store %q: Config.Dir is empty", c.Name)
	}
	if c.Name == "" {
		c.Name = c.Dir
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	c.SegmentBytes = min(max(c.SegmentBytes, minSegmentBytes), maxSegmentBytes)
	if c.IndexEvery <= 0 {
		c.IndexEvery = DefaultIndexEvery
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch c.Sync {
	case SyncInterval, SyncAlways, SyncNever:
	default:
		return fmt.Errorf("store %q: unknown sync policy %d", c.Name, int(c.Sync))
	}
	switch c.Compression {
	case CompressNone, CompressS2:
	default:
		return fmt.Errorf("store %q: unknown compression %d", c.Name, int(c.Compression))
	}
	return nil
}

// Compression says how Commit writes the records appended since the last one.
type Compression int

const (
	// CompressNone writes every record as it is (the default).
	CompressNone Compression = iota
	// CompressS2 packs consecutive records into S2-compressed blocks (docs/storage.md,
	// "Compressed blocks") when that saves at least an eighth of their bytes; records
	// that do not shrink are written as they are. Reads expand blocks transparently.
	CompressS2
)

// ParseCompression parses "none" (or "") and "s2".
func ParseCompression(s string) (Compression, error) {
	switch s {
	case "none", "":
		return CompressNone, nil
	case "s2":
		return CompressS2, nil
	}
	return CompressNone, fmt.Errorf("store: unknown compression %q (want none or s2)", s)
}

func (c Compression) String() string {
	switch c {
	case CompressNone:
		return "none"
	case CompressS2:
		return "s2"
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}
