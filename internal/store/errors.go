package store

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	ErrNotFound = errors.New("store: message not found") // never written, deleted or expired
	ErrFull     = errors.New("store: limits reached")    // DiscardNew refused the append
	ErrNoSpace  = errors.New("store: no space left on device")
	ErrCorrupt  = errors.New("store: corrupt record")
	ErrClosed   = errors.New("store: log closed")
	ErrTooLarge = errors.New("store: record too large") // larger than SegmentBytes (or MaxBytes)
	// ErrBadBlock: AppendBlock was given inner bytes that are not whole messages,
	// or a block that does not expand to them.
	ErrBadBlock = errors.New("store: malformed message block")
	// ErrCutInBlock: TruncateAfter can cut a log only between compressed blocks,
	// not inside one (a log that is cut, as a replication log is, keeps
	// Compression off).
	ErrCutInBlock = errors.New("store: cut inside a compressed block")
	// ErrNotCompacted: Compact on a log opened without Config.Keys.
	ErrNotCompacted = errors.New("store: the log is not compacted")
)

// Corruption describes damaged bytes found in a segment: by recovery (listed in
// Report.Corrupt) or by a later read. Errors returned for corrupt records are
// *Corruption; they match ErrCorrupt with errors.Is.
type Corruption struct {
	Log               string // Config.Name of the log
	Segment           string // file path
	Offset            int64
	FirstSeq, LastSeq uint64 // sequences affected, as well as can be known (0, 0: none lost)
	Err               error
}

func (c Corruption) Error() string {
	var seqs string
	switch {
	case c.FirstSeq == 0 && c.LastSeq == 0:
		seqs = "no messages lost"
	case c.FirstSeq == c.LastSeq:
		seqs = fmt.Sprintf("message %d", c.FirstSeq)
	default:
		seqs = fmt.Sprintf("messages %d-%d", c.FirstSeq, c.LastSeq)
	}
	msg := fmt.Sprintf("store %q: corrupt data in %s at offset %d (%s)", c.Log, c.Segment, c.Offset, seqs)
	if c.Err != nil {
		msg += ": " + c.Err.Error()
	}
	return msg
}

func (c Corruption) Unwrap() []error {
	if c.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, c.Err}
}

// ioErr wraps an I/O error with the log and file it concerns; running out of space
// (or quota) also matches ErrNoSpace so the owner can tell it apart.
func (l *Log) ioErr(op, path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("store %q: %s %s: %w: %w", l.cfg.Name, op, path, ErrNoSpace, err)
	}
	return fmt.Errorf("store %q: %s %s: %w", l.cfg.Name, op, path, err)
}
