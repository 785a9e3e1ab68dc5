package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Msg is one raft message of one group.
type Msg struct {
	Group uint64
	M     *raftpb.Message
}

// Beat is one group's heartbeat (or heartbeat response) inside a coalesced
// heartbeat: the sending and receiving replicas are the batch's nodes, so a beat
// carries only what raft's MsgHeartbeat does beyond them.
type Beat struct {
	Group  uint64
	Term   uint64
	Commit uint64 // heartbeats only
	// Quiesce (heartbeats only): the leader stops ticking the group and asks the
	// follower to do the same.
	Quiesce bool
}

// Batch is everything one node sends another in one loop iteration: raft
// messages of any number of groups plus the coalesced heartbeats and heartbeat
// responses. A batch with nothing in it is a node-level heartbeat (it tells the
// receiver that the sender is alive; quiesced groups rely on that).
type Batch struct {
	From, To  uint64
	Msgs      []Msg
	Beats     []Beat
	BeatResps []Beat
}

// Reset empties b, keeping its slices' capacity.
func (b *Batch) Reset() {
	clear(b.Msgs)
	b.Msgs = b.Msgs[:0]
	b.Beats = b.Beats[:0]
	b.BeatResps = b.BeatResps[:0]
}

// Empty reports whether b carries nothing but its nodes.
func (b *Batch) Empty() bool {
	return len(b.Msgs) == 0 && len(b.Beats) == 0 && len(b.BeatResps) == 0
}

// Wire format of a batch (all integers unsigned varints):
//
//	version (one byte, 1)
//	from, to
//	n, then n messages: group, length, raftpb.Message (protobuf)
//	n, then n heartbeats: group, term, commit, flags (one byte; bit 0 quiesce)
//	n, then n heartbeat responses: group, term
//
// The batch is the whole frame: the transport delimits it.
const batchVersion = 1

// Limits the decoder enforces.
const (
	// MaxBatchMsgs bounds the messages (and beats) in one batch.
	MaxBatchMsgs = 1 << 20
)

// ErrMalformed is the error of DecodeBatch for input that is not a batch.
var ErrMalformed = errors.New("replica: malformed batch")

var marshalOpts = proto.MarshalOptions{UseCachedSize: true}

// AppendBatch appends the encoding of b to dst.
func AppendBatch(dst []byte, b *Batch) ([]byte, error) {
	dst = append(dst, batchVersion)
	dst = binary.AppendUvarint(dst, b.From)
	dst = binary.AppendUvarint(dst, b.To)
	dst = binary.AppendUvarint(dst, uint64(len(b.Msgs)))
	var err error
	for i := range b.Msgs {
		m := &b.Msgs[i]
		dst = binary.AppendUvarint(dst, m.Group)
		if dst, err = appendMessage(dst, m.M); err != nil {
			return dst, fmt.Errorf("replica: group %d: %w", m.Group, err)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Beats)))
	for i := range b.Beats {
		h := &b.Beats[i]
		dst = binary.AppendUvarint(dst, h.Group)
		dst = binary.AppendUvarint(dst, h.Term)
		dst = binary.AppendUvarint(dst, h.Commit)
		var flags byte
		if h.Quiesce {
			flags |= 1
		}
		dst = append(dst, flags)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.BeatResps)))
	for i := range b.BeatResps {
		h := &b.BeatResps[i]
		dst = binary.AppendUvarint(dst, h.Group)
		dst = binary.AppendUvarint(dst, h.Term)
	}
	return dst, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad or truncated %s", ErrMalformed, what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items each at least min bytes long, refusing one that
// the rest of the input cannot hold (so that no huge allocation follows).
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && (n > MaxBatchMsgs || n > uint64(len(d.b)/min)) {
		d.err = fmt.Errorf("%w: %d %s in %d bytes", ErrMalformed, n, what, len(d.b))
		return 0
	}
	return int(n)
}

// DecodeBatch decodes one batch into b (reusing its slices; the messages are
// new and do not alias data). On error b holds no usable content.
func DecodeBatch(data []byte, b *Batch) error {
	b.Reset()
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", ErrMalformed)
	}
	if data[0] != batchVersion {
		return fmt.Errorf("%w: version %d", ErrMalformed, data[0])
	}
	d := decoder{b: data[1:]}
	b.From = d.uvarint("sender")
	b.To = d.uvarint("receiver")
	n := d.count("messages", 2)
	for i := 0; i < n && d.err == nil; i++ {
		g := d.uvarint("group")
		l := d.uvarint("message length")
		if d.err != nil {
			break
		}
		if l > uint64(len(d.b)) {
			d.err = fmt.Errorf("%w: message of %d bytes in %d", ErrMalformed, l, len(d.b))
			break
		}
		m, err := decodeMessage(d.b[:l])
		if err != nil {
			d.err = fmt.Errorf("%w: message of group %d: %w", ErrMalformed, g, err)
			break
		}
		d.b = d.b[l:]
		b.Msgs = append(b.Msgs, Msg{Group: g, M: m})
	}
	n = d.count("heartbeats", 4)
	for i := 0; i < n && d.err == nil; i++ {
		h := Beat{Group: d.uvarint("group"), Term: d.uvarint("term"), Commit: d.uvarint("commit")}
		if d.err != nil {
			break
		}
		if len(d.b) == 0 {
			d.err = fmt.Errorf("%w: truncated heartbeat", ErrMalformed)
			break
		}
		flags := d.b[0]
		d.b = d.b[1:]
		if flags&^1 != 0 {
			d.err = fmt.Errorf("%w: heartbeat flags %#x", ErrMalformed, flags)
			break
		}
		h.Quiesce = flags&1 != 0
		b.Beats = append(b.Beats, h)
	}
	n = d.count("heartbeat responses", 2)
	for i := 0; i < n && d.err == nil; i++ {
		h := Beat{Group: d.uvarint("group"), Term: d.uvarint("term")}
		if d.err == nil {
			b.BeatResps = append(b.BeatResps, h)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the batch", ErrMalformed, len(d.b))
	}
	if d.err != nil {
		b.Reset()
		return d.err
	}
	return nil
}
