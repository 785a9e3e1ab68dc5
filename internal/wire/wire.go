package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Version is the protocol version this package speaks. It travels in CONNECT and INFO;
// a server refuses a CONNECT whose version it does not know with CodeVersion.
const Version = 1

// Type identifies a frame.
type Type uint8

// Frame types. Values are stable on the wire.
const (
	TypeConnect Type = 0x01 // client → server, first frame
	TypeInfo    Type = 0x02 // server → client, answer to CONNECT (and updates, ConnectInfoUpdates)
	TypePub     Type = 0x03 // client → server
	TypeSub     Type = 0x04 // client → server
	TypeUnsub   Type = 0x05 // client → server
	TypeMsg     Type = 0x06 // server → client
	TypePing    Type = 0x07 // either way
	TypePong    Type = 0x08 // either way
	TypeErr     Type = 0x09 // server → client
	TypeOK      Type = 0x0A // server → client, answer to a frame that asked for an ack
)

// Route frame types, spoken only between cluster nodes (docs/protocol.md, "Cluster
// routes"). They have a range of their own so that a client frame and a route frame
// can never be confused; PING, PONG and ERR are shared with the client protocol.
const (
	TypeRouteHello    Type = 0x20 // node ↔ node, first frame each way
	TypeRouteInterest Type = 0x21 // node ↔ node, a subject's interest changed
	TypeRouteRefresh  Type = 0x22 // node ↔ node, begin or end of a full re-send of interest
	TypeRouteMsg      Type = 0x23 // node ↔ node, a forwarded message
	TypeRouteAck      Type = 0x24 // node ↔ node, cumulative acknowledgement of RMSG sequences
	TypeRouteRaft     Type = 0x25 // node ↔ node, a batch of Raft messages (internal/replica)
	TypeRouteAuth     Type = 0x26 // node ↔ node, proof of the cluster secret, right after RHELLO
)

func (t Type) String() string {
	switch t {
	case TypeConnect:
		return "CONNECT"
	case TypeInfo:
		return "INFO"
	case TypePub:
		return "PUB"
	case TypeSub:
		return "SUB"
	case TypeUnsub:
		return "UNSUB"
	case TypeMsg:
		return "MSG"
	case TypePing:
		return "PING"
	case TypePong:
		return "PONG"
	case TypeErr:
		return "ERR"
	case TypeOK:
		return "OK"
	case TypeRouteHello:
		return "RHELLO"
	case TypeRouteInterest:
		return "RINT"
	case TypeRouteRefresh:
		return "RREFRESH"
	case TypeRouteMsg:
		return "RMSG"
	case TypeRouteAck:
		return "RACK"
	case TypeRouteRaft:
		return "RRAFT"
	case TypeRouteAuth:
		return "RAUTH"
	}
	return fmt.Sprintf("TYPE(0x%02x)", uint8(t))
}

// Flag bits of PUB, SUB, UNSUB, MSG, RINT and RMSG bodies. Each says an optional field
// is present, and a bit means the same in every frame that allows it, so the bits are
// one namespace across the client and route protocols.
const (
	FlagAck     uint8 = 1 << 0 // PUB, SUB, UNSUB: an ack id follows; the server answers OK or ERR with it
	FlagRoute   uint8 = 1 << 0 // RMSG: the subject the message is routed by follows its subject
	FlagReply   uint8 = 1 << 1 // PUB, MSG, RMSG: a reply subject follows the subject
	FlagHeaders uint8 = 1 << 2 // PUB, MSG, RMSG: a header block precedes the payload
	FlagQueue   uint8 = 1 << 3 // SUB, RINT: a queue group name follows the subject
	FlagFilter  uint8 = 1 << 4 // SUB: a filter expression follows
	FlagMax     uint8 = 1 << 5 // UNSUB: remove after this many more messages
	FlagSeq     uint8 = 1 << 6 // RMSG: a route sequence number follows the attributes
	FlagQueues  uint8 = 1 << 7 // RMSG: a list of queue group names follows the reply
)

const (
	pubFlags      = FlagAck | FlagReply | FlagHeaders
	msgFlags      = FlagReply | FlagHeaders
	subFlags      = FlagAck | FlagQueue | FlagFilter
	unsubFlags    = FlagAck | FlagMax
	interestFlags = FlagQueue
	routeMsgFlags = FlagSeq | FlagRoute | FlagReply | FlagQueues | FlagHeaders
)

// Connect flags (uvarint in CONNECT).
const (
	ConnectNoEcho       uint64 = 1 << 0 // do not deliver this connection's own publications to it
	ConnectNoResponders uint64 = 1 << 1 // answer a request that has no subscriber with a 503 status MSG
	// ConnectInfoUpdates asks for a new INFO whenever connect_urls changes. INFO
	// after the handshake is opt-in because clients written before it may not
	// expect one.
	ConnectInfoUpdates uint64 = 1 << 2
)

// Info flags (uvarint in INFO).
const (
	InfoHeaders      uint64 = 1 << 0 // the server accepts headers
	InfoAuthRequired uint64 = 1 << 1 // credentials are checked
)

// Limits of the frame layout itself; servers usually configure smaller ones.
const (
	// MaxHeaderLen is the longest a frame header (type + body length) can be.
	MaxHeaderLen = 1 + binary.MaxVarintLen64
	// DefaultMaxBody is the body limit used when a caller passes 0 to Decode.
	DefaultMaxBody = 1<<20 + 64<<10
)

// Decoding errors. Callers branch on them with errors.Is; every error but ErrIncomplete
// means the stream is unusable and the connection should be closed.
var (
	ErrIncomplete  = errors.New("wire: incomplete frame")
	ErrTooLarge    = errors.New("wire: frame too large")
	ErrMalformed   = errors.New("wire: malformed frame")
	ErrUnknownType = errors.New("wire: unknown frame type")
)

// Frame is one decoded frame. Which fields are set depends on Type; byte slices point
// into the decoded buffer.
type Frame struct {
	Type  Type
	Flags uint8
	// Attrs is the attribute byte of RMSG: the QoS (AttrQoS) and the Attr* bits.
	Attrs uint8
	// Phase is the RREFRESH phase, RefreshBegin or RefreshEnd.
	Phase uint8
	// ID is the ack id of PUB/SUB/UNSUB (0 = no ack asked), and the id an OK or ERR
	// answers (0 = not tied to a frame).
	ID uint64
	// SID is the subscription id of SUB, UNSUB and MSG.
	SID uint64
	// Max is the UNSUB message budget (FlagMax).
	Max uint64
	// Code is the ERR code.
	Code Code
	// Weight is the RINT interest count (0 = the interest is gone).
	Weight uint32
	// Seq is the route sequence number of RMSG (FlagSeq; 0 = none) and the cumulative
	// sequence RACK acknowledges.
	Seq uint64
	// Generation is the RREFRESH generation.
	Generation uint64

	Subject []byte
	// Route is the subject an RMSG is routed by when it differs from Subject
	// (FlagRoute), nil otherwise.
	Route  []byte
	Reply  []byte
	Queue  []byte // SUB, RINT
	Filter []byte
	// Queues is the list of queue group names of RMSG (FlagQueues), nil if none; walk
	// it with QueueList.Next or All.
	Queues QueueList
	// Header is the encoded header block of PUB/MSG/RMSG (see Header), nil if none.
	Header Header
	// Payload is the message of PUB/MSG/RMSG, the text of ERR, the proof of RAUTH
	// (RouteAuthLen bytes), and the whole body of CONNECT, INFO and RHELLO (parse it
	// with ParseConnect / ParseInfo / ParseRouteHello).
	Payload []byte
}

// Decode reads one frame from the front of buf into f and returns the number of bytes
// it used. It returns ErrIncomplete when buf holds only part of a frame (read more and
// call again) and ErrTooLarge when the body length exceeds maxBody (0 means
// DefaultMaxBody), before the body has arrived. Decode never allocates.
func (f *Frame) Decode(buf []byte, maxBody int) (int, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	if len(buf) < 2 {
		return 0, ErrIncomplete
	}
	t := Type(buf[0])
	blen, k := binary.Uvarint(buf[1:])
	if k == 0 {
		return 0, ErrIncomplete
	}
	if k < 0 || k != uvarintLen(blen) {
		return 0, fmt.Errorf("%w: body length is not a minimal varint", ErrMalformed)
	}
	if blen > uint64(maxBody) {
		return 0, fmt.Errorf("%w: %s body of %d bytes exceeds %d", ErrTooLarge, t, blen, maxBody)
	}
	start := 1 + k
	end := start + int(blen)
	if len(buf) < end {
		return 0, ErrIncomplete
	}
	*f = Frame{Type: t}
	if err := f.parseBody(buf[start:end]); err != nil {
		return 0, err
	}
	return end, nil
}

// FrameLen reports the total length of the frame at the front of buf (header and
// body) once the header is complete, or ErrIncomplete. Readers use it to size buffers.
func FrameLen(buf []byte) (int, error) {
	if len(buf) < 2 {
		return 0, ErrIncomplete
	}
	blen, k := binary.Uvarint(buf[1:])
	if k == 0 {
		return 0, ErrIncomplete
	}
	if k < 0 || blen > 1<<40 {
		return 0, fmt.Errorf("%w: body length overflows", ErrMalformed)
	}
	return 1 + k + int(blen), nil
}

func (f *Frame) parseBody(b []byte) error {
	r := reader{b: b}
	switch f.Type {
	case TypePub, TypeMsg:
		f.Flags = r.byte()
		allowed := pubFlags
		if f.Type == TypeMsg {
			allowed = msgFlags
			f.SID = r.uvarint()
		}
		if f.Flags&^allowed != 0 {
			return f.malformed("unknown flags 0x%02x", f.Flags)
		}
		if f.Flags&FlagAck != 0 {
			f.ID = r.ackID()
		}
		f.Subject = r.str()
		if f.Flags&FlagReply != 0 {
			f.Reply = r.nonEmpty("reply")
		}
		if f.Flags&FlagHeaders != 0 {
			f.Header = Header(r.nonEmpty("header block"))
		}
		f.Payload = r.rest()
	case TypeSub:
		f.Flags = r.byte()
		if f.Flags&^subFlags != 0 {
			return f.malformed("unknown flags 0x%02x", f.Flags)
		}
		if f.Flags&FlagAck != 0 {
			f.ID = r.ackID()
		}
		f.SID = r.uvarint()
		f.Subject = r.str()
		if f.Flags&FlagQueue != 0 {
			f.Queue = r.nonEmpty("queue")
		}
		if f.Flags&FlagFilter != 0 {
			f.Filter = r.nonEmpty("filter")
		}
		r.end()
	case TypeUnsub:
		f.Flags = r.byte()
		if f.Flags&^unsubFlags != 0 {
			return f.malformed("unknown flags 0x%02x", f.Flags)
		}
		if f.Flags&FlagAck != 0 {
			f.ID = r.ackID()
		}
		f.SID = r.uvarint()
		if f.Flags&FlagMax != 0 {
			if f.Max = r.uvarint(); f.Max == 0 && r.err == "" {
				r.err = "max flag with max 0"
			}
		}
		r.end()
	case TypePing, TypePong:
		r.end()
	case TypeOK:
		f.ID = r.uvarint()
		r.end()
	case TypeErr:
		c := r.uvarint()
		if c > 0xffff {
			return f.malformed("error code %d out of range", c)
		}
		f.Code = Code(c)
		f.ID = r.uvarint()
		f.Payload = r.str()
		r.end()
	case TypeConnect, TypeInfo, TypeRouteHello:
		// Later versions may append fields; ParseConnect/ParseInfo/ParseRouteHello
		// ignore what they do not know.
		f.Payload = b
	case TypeRouteInterest:
		f.Flags = r.byte()
		if f.Flags&^interestFlags != 0 {
			return f.malformed("unknown flags 0x%02x", f.Flags)
		}
		f.Subject = r.str()
		if f.Flags&FlagQueue != 0 {
			f.Queue = r.nonEmpty("queue")
		}
		w := r.uvarint()
		if w > MaxWeight {
			return f.malformed("weight %d out of range", w)
		}
		f.Weight = uint32(w)
		r.end()
	case TypeRouteRefresh:
		f.Phase = r.byte()
		if r.err == "" && f.Phase != RefreshBegin && f.Phase != RefreshEnd {
			return f.malformed("unknown phase %d", f.Phase)
		}
		if f.Generation = r.uvarint(); f.Generation == 0 && r.err == "" {
			r.err = "generation 0"
		}
		r.end()
	case TypeRouteMsg:
		f.Flags = r.byte()
		if f.Flags&^routeMsgFlags != 0 {
			return f.malformed("unknown flags 0x%02x", f.Flags)
		}
		f.Attrs = r.byte()
		if r.err == "" {
			if f.Attrs&^routeAttrs != 0 {
				return f.malformed("unknown attributes 0x%02x", f.Attrs)
			}
			if f.Attrs&AttrQoS > 2 {
				return f.malformed("QoS %d out of range", f.Attrs&AttrQoS)
			}
			if f.Attrs&AttrGroupOnly != 0 && f.Flags&FlagQueues == 0 {
				return f.malformed("group-only without queue groups")
			}
		}
		if f.Flags&FlagSeq != 0 {
			if f.Seq = r.uvarint(); f.Seq == 0 && r.err == "" {
				r.err = "sequence 0 with seq flag"
			}
		}
		f.Subject = r.str()
		if f.Flags&FlagRoute != 0 {
			f.Route = r.nonEmpty("route subject")
		}
		if f.Flags&FlagReply != 0 {
			f.Reply = r.nonEmpty("reply")
		}
		if f.Flags&FlagQueues != 0 {
			f.Queues = r.queues()
		}
		if f.Flags&FlagHeaders != 0 {
			f.Header = Header(r.nonEmpty("header block"))
		}
		f.Payload = r.rest()
	case TypeRouteAck:
		if f.Seq = r.uvarint(); f.Seq == 0 && r.err == "" {
			r.err = "sequence 0"
		}
		r.end()
	case TypeRouteRaft:
		// The batch is the replication layer's to decode (internal/replica).
		if f.Payload = r.rest(); len(f.Payload) == 0 {
			r.err = "empty batch"
		}
	case TypeRouteAuth:
		if f.Payload = r.rest(); len(f.Payload) != RouteAuthLen {
			r.err = fmt.Sprintf("proof of %d bytes, want %d", len(f.Payload), RouteAuthLen)
		}
	default:
		return fmt.Errorf("%w: 0x%02x", ErrUnknownType, uint8(f.Type))
	}
	if r.err != "" {
		return f.malformed("%s", r.err)
	}
	return nil
}

func (f *Frame) malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, f.Type, fmt.Sprintf(format, args...))
}

// reader walks a body; the first failure sticks in err and later reads return zero
// values, so parsers check once at the end.
type reader struct {
	b   []byte
	err string
}

func (r *reader) byte() uint8 {
	if r.err != "" {
		return 0
	}
	if len(r.b) == 0 {
		r.err = "truncated body"
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != "" {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 || k != uvarintLen(v) {
		// One frame has one encoding: over-long varints are refused.
		r.err = "bad or non-minimal varint"
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) ackID() uint64 {
	v := r.uvarint()
	if v == 0 && r.err == "" {
		r.err = "ack id 0 with ack flag"
	}
	return v
}

func (r *reader) str() []byte {
	n := r.uvarint()
	if r.err != "" {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = "string runs past the body"
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// nonEmpty reads a string whose presence a flag announced; flagged fields are never
// empty, so that every frame has exactly one encoding.
func (r *reader) nonEmpty(what string) []byte {
	s := r.str()
	if len(s) == 0 && r.err == "" {
		r.err = what + " flagged but empty"
	}
	return s
}

// urls reads a count and that many non-empty strings (RHELLO's client URLs, INFO's
// connect URLs); nil when the count is 0.
func (r *reader) urls(what string) []string {
	n := r.uvarint()
	// Every URL takes at least two bytes, so a count the body cannot hold is refused
	// before it sizes anything.
	if r.err == "" && n > uint64(len(r.b)/2) {
		r.err = fmt.Sprintf("%d %ss in %d bytes", n, what, len(r.b))
	}
	if r.err != "" || n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		u := r.nonEmpty(what)
		if r.err != "" {
			return nil
		}
		out = append(out, string(u))
	}
	return out
}

func (r *reader) rest() []byte {
	if r.err != "" {
		return nil
	}
	s := r.b
	r.b = nil
	return s
}

func (r *reader) end() {
	if r.err == "" && len(r.b) != 0 {
		r.err = fmt.Sprintf("%d trailing bytes", len(r.b))
	}
}

// text is what the encoders accept for subjects and names: string or []byte.
type text interface{ ~string | ~[]byte }

func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

func strLen[S text](s S) int { return uvarintLen(uint64(len(s))) + len(s) }

func appendStr[S text](dst []byte, s S) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendHead(dst []byte, t Type, bodyLen int) []byte {
	dst = append(dst, byte(t))
	return binary.AppendUvarint(dst, uint64(bodyLen))
}

// AppendPub appends a PUB frame. id 0 asks for no ack; an empty reply or header is left
// out.
func AppendPub[S text](dst []byte, id uint64, subject, reply S, header Header, payload []byte) []byte {
	var flags uint8
	n := 1 + strLen(subject) + len(payload)
	if id != 0 {
		flags |= FlagAck
		n += uvarintLen(id)
	}
	if len(reply) > 0 {
		flags |= FlagReply
		n += strLen(reply)
	}
	if len(header) > 0 {
		flags |= FlagHeaders
		n += strLen(header)
	}
	dst = appendHead(dst, TypePub, n)
	dst = append(dst, flags)
	if id != 0 {
		dst = binary.AppendUvarint(dst, id)
	}
	dst = appendStr(dst, subject)
	if len(reply) > 0 {
		dst = appendStr(dst, reply)
	}
	if len(header) > 0 {
		dst = appendStr(dst, header)
	}
	return append(dst, payload...)
}

// MsgLen is the encoded size of the MSG frame AppendMsg would write.
func MsgLen(sid uint64, subject, reply []byte, header Header, payload []byte) int {
	n := msgBodyLen(sid, subject, reply, header, payload)
	return 1 + uvarintLen(uint64(n)) + n
}

func msgBodyLen(sid uint64, subject, reply []byte, header Header, payload []byte) int {
	n := 1 + uvarintLen(sid) + strLen(subject) + len(payload)
	if len(reply) > 0 {
		n += strLen(reply)
	}
	if len(header) > 0 {
		n += strLen(header)
	}
	return n
}

// AppendMsg appends a MSG frame delivering a message to subscription sid.
func AppendMsg(dst []byte, sid uint64, subject, reply []byte, header Header, payload []byte) []byte {
	var flags uint8
	if len(reply) > 0 {
		flags |= FlagReply
	}
	if len(header) > 0 {
		flags |= FlagHeaders
	}
	dst = appendHead(dst, TypeMsg, msgBodyLen(sid, subject, reply, header, payload))
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, sid)
	dst = appendStr(dst, subject)
	if len(reply) > 0 {
		dst = appendStr(dst, reply)
	}
	if len(header) > 0 {
		dst = appendStr(dst, header)
	}
	return append(dst, payload...)
}

// AppendSub appends a SUB frame. An empty queue or filter is left out.
func AppendSub[S text](dst []byte, id, sid uint64, subject, queue, filter S) []byte {
	var flags uint8
	n := 1 + uvarintLen(sid) + strLen(subject)
	if id != 0 {
		flags |= FlagAck
		n += uvarintLen(id)
	}
	if len(queue) > 0 {
		flags |= FlagQueue
		n += strLen(queue)
	}
	if len(filter) > 0 {
		flags |= FlagFilter
		n += strLen(filter)
	}
	dst = appendHead(dst, TypeSub, n)
	dst = append(dst, flags)
	if id != 0 {
		dst = binary.AppendUvarint(dst, id)
	}
	dst = binary.AppendUvarint(dst, sid)
	dst = appendStr(dst, subject)
	if len(queue) > 0 {
		dst = appendStr(dst, queue)
	}
	if len(filter) > 0 {
		dst = appendStr(dst, filter)
	}
	return dst
}

// AppendUnsub appends an UNSUB frame. max 0 removes the subscription now; otherwise it
// is removed after max more messages (counting from when the server reads the frame).
func AppendUnsub(dst []byte, id, sid, max uint64) []byte {
	var flags uint8
	n := 1 + uvarintLen(sid)
	if id != 0 {
		flags |= FlagAck
		n += uvarintLen(id)
	}
	if max != 0 {
		flags |= FlagMax
		n += uvarintLen(max)
	}
	dst = appendHead(dst, TypeUnsub, n)
	dst = append(dst, flags)
	if id != 0 {
		dst = binary.AppendUvarint(dst, id)
	}
	dst = binary.AppendUvarint(dst, sid)
	if max != 0 {
		dst = binary.AppendUvarint(dst, max)
	}
	return dst
}

// AppendPing appends a PING frame.
func AppendPing(dst []byte) []byte { return append(dst, byte(TypePing), 0) }

// AppendPong appends a PONG frame.
func AppendPong(dst []byte) []byte { return append(dst, byte(TypePong), 0) }

// AppendOK appends an OK frame answering ack id.
func AppendOK(dst []byte, id uint64) []byte {
	dst = appendHead(dst, TypeOK, uvarintLen(id))
	return binary.AppendUvarint(dst, id)
}

// AppendErr appends an ERR frame. id is the ack id of the frame it answers, or 0.
func AppendErr(dst []byte, code Code, id uint64, text string) []byte {
	dst = appendHead(dst, TypeErr, uvarintLen(uint64(code))+uvarintLen(id)+strLen(text))
	dst = binary.AppendUvarint(dst, uint64(code))
	dst = binary.AppendUvarint(dst, id)
	return appendStr(dst, text)
}

// KeepTail prepares a read buffer for the next read after frames were decoded from
// buf[:off]: the unread bytes buf[off:filled] move to the front, and when they fill
// the whole buffer (one frame larger than it) a larger buffer is returned, sized for
// that frame when its header says how large it is. It returns the buffer, how much of
// it is filled, and whether it grew.
func KeepTail(buf []byte, off, filled int) ([]byte, int, bool) {
	if off > 0 {
		filled = copy(buf, buf[off:filled])
	}
	if filled < len(buf) {
		return buf, filled, false
	}
	need, err := FrameLen(buf[:filled])
	if err != nil || need <= len(buf) {
		need = 2 * len(buf)
	}
	nb := make([]byte, need)
	copy(nb, buf[:filled])
	return nb, filled, true
}
