package streamapi

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// AckMeta is what the ack subject of a delivered message says about it:
// "$TERN.ACK.<stream>.<consumer>.<partition>.<deliveries>.<stream seq>.<consumer seq>.<unix nanos>.<pending>".
// Publishing an ack body (AckKind) to that subject acknowledges the message.
type AckMeta struct {
	Stream, Consumer string
	Partition        int
	Deliveries       uint64 // 1 on first delivery
	StreamSeq        uint64 // sequence in the partition
	ConsumerSeq      uint64 // the consumer's own count of deliveries
	Time             int64  // when the message was stored, unix nanoseconds
	Pending          uint64 // messages left for the consumer after this one
}

// AppendAckSubject appends m's ack subject.
func AppendAckSubject(dst []byte, m *AckMeta) []byte {
	dst = append(dst, AckPrefix...)
	dst = append(dst, m.Stream...)
	dst = append(dst, '.')
	dst = append(dst, m.Consumer...)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(m.Partition), 10)
	for _, v := range [...]uint64{m.Deliveries, m.StreamSeq, m.ConsumerSeq, uint64(m.Time), m.Pending} {
		dst = append(dst, '.')
		dst = strconv.AppendUint(dst, v, 10)
	}
	return dst
}

// ErrNotAckSubject reports a subject that is not a well-formed ack subject.
var ErrNotAckSubject = errors.New("streamapi: not an ack subject")

// AckRef is a parsed ack subject whose Stream and Consumer share memory with the
// subject, so the server can look them up without allocating.
type AckRef struct {
	Stream, Consumer []byte
	Partition        int
	Deliveries       uint64
	StreamSeq        uint64
	ConsumerSeq      uint64
	Time             int64
	Pending          uint64
}

// ParseAckSubject parses an ack subject without allocating.
func ParseAckSubject(subj []byte) (AckRef, error) {
	var r AckRef
	if !bytes.HasPrefix(subj, []byte(AckPrefix)) {
		return r, ErrNotAckSubject
	}
	rest := subj[len(AckPrefix):]
	var toks [8][]byte
	for i := range toks {
		j := bytes.IndexByte(rest, '.')
		if i == len(toks)-1 {
			if j >= 0 {
				return r, ErrNotAckSubject
			}
			toks[i] = rest
			break
		}
		if j <= 0 {
			return r, ErrNotAckSubject
		}
		toks[i], rest = rest[:j], rest[j+1:]
	}
	var nums [6]uint64
	for i := range nums {
		v, ok := parseUint(toks[i+2])
		if !ok {
			return r, ErrNotAckSubject
		}
		nums[i] = v
	}
	if len(toks[0]) == 0 || len(toks[1]) == 0 || nums[0] > 1<<20 {
		return r, ErrNotAckSubject
	}
	r.Stream, r.Consumer = toks[0], toks[1]
	r.Partition = int(nums[0])
	r.Deliveries, r.StreamSeq, r.ConsumerSeq = nums[1], nums[2], nums[3]
	r.Time, r.Pending = int64(nums[4]), nums[5]
	return r, nil
}

// Meta copies r into an AckMeta.
func (r *AckRef) Meta() AckMeta {
	return AckMeta{Stream: string(r.Stream), Consumer: string(r.Consumer), Partition: r.Partition,
		Deliveries: r.Deliveries, StreamSeq: r.StreamSeq, ConsumerSeq: r.ConsumerSeq, Time: r.Time, Pending: r.Pending}
}

func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// AckKind is what an ack body asks for.
type AckKind uint8

const (
	// Ack: the message is handled. An empty body is an Ack.
	Ack AckKind = iota
	// Nak: deliver it again, after the delay if one is given ("nak 5s").
	Nak
	// InProgress: still working on it; restart its ack wait.
	InProgress
	// Term: never deliver it again; it goes to the dead-letter subject ("term <reason>").
	Term
)

// Ack bodies.
const (
	AckBody        = "ack"
	NakBody        = "nak"
	InProgressBody = "wip"
	TermBody       = "term"
)

// ParseAckBody reads an ack body: "", "ack", "nak", "nak <duration>", "wip", "term" or
// "term <reason>". The reason shares memory with b.
func ParseAckBody(b []byte) (kind AckKind, delay time.Duration, reason []byte, err error) {
	word, arg, _ := bytes.Cut(b, []byte{' '})
	switch string(word) {
	case "", AckBody:
		return Ack, 0, nil, nil
	case NakBody:
		if len(arg) > 0 {
			d, err := time.ParseDuration(string(arg))
			if err != nil || d < 0 {
				return 0, 0, nil, fmt.Errorf("streamapi: nak delay %q: want a duration such as 5s", arg)
			}
			delay = d
		}
		return Nak, delay, nil, nil
	case InProgressBody:
		return InProgress, 0, nil, nil
	case TermBody:
		return Term, 0, arg, nil
	}
	return 0, 0, nil, fmt.Errorf("streamapi: unknown ack %q", truncate(string(b)))
}
