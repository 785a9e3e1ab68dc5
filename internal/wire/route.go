package wire

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math"
)

// RREFRESH phases.
const (
	RefreshBegin uint8 = 1 // the sender starts re-sending all its interest
	RefreshEnd   uint8 = 2 // the sender has re-sent all its interest
)

// Attribute bits of RMSG (the attrs byte). They describe the message rather than the
// layout of the body, so they have a byte of their own instead of taking flag bits.
const (
	// AttrQoS masks the MQTT QoS the message was published with, 0–2 (3 is malformed).
	AttrQoS uint8 = 0x03
	// AttrRetain marks a message its publisher asked to be retained.
	AttrRetain uint8 = 1 << 2
	// AttrGroupOnly restricts delivery to the listed queue groups: plain subscribers
	// on the receiving node do not get the message. It requires FlagQueues. A
	// message restricted to one deliver group travels with it and that one group.
	AttrGroupOnly uint8 = 1 << 3

	routeAttrs = AttrQoS | AttrRetain | AttrGroupOnly
)

// Limits of route frames.
const (
	// MaxWeight is the largest RINT weight: interest counts are 32-bit everywhere
	// else, and a larger value could only come from a broken peer.
	MaxWeight = math.MaxUint32
	// MaxRouteQueues is the most queue group names one RMSG may carry. It bounds the
	// work a receiver does per message (each local group is looked up in the list).
	// A sender chosen for more groups at once sends the message several times: once
	// with the plain subscribers and up to MaxRouteQueues groups, then with
	// AttrGroupOnly and the remaining groups, so no subscriber gets it twice.
	MaxRouteQueues = 256
)

// QueueList is the queue-group section of an RMSG as it is on the wire: names as
// str, without the count that precedes them. Decode has checked it, so walking a
// decoded list never fails; the names point into the decoded buffer.
type QueueList []byte

// Next returns the first name of the list and the rest, or a nil name at the end of
// the list (or at bytes that do not form a name, which a decoded list never has).
//
//	for q, rest := f.Queues.Next(); q != nil; q, rest = rest.Next() { … }
func (l QueueList) Next() (name []byte, rest QueueList) {
	n, k := binary.Uvarint(l)
	if k <= 0 || n == 0 || n > uint64(len(l)-k) {
		return nil, nil
	}
	end := k + int(n)
	return l[k:end:end], l[end:]
}

// Len is the number of names in the list.
func (l QueueList) Len() int {
	n := 0
	for q, rest := l.Next(); q != nil; q, rest = rest.Next() {
		n++
	}
	return n
}

// All yields the names of the list in order.
func (l QueueList) All() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for q, rest := l.Next(); q != nil; q, rest = rest.Next() {
			if !yield(q) {
				return
			}
		}
	}
}

// queues reads the queue-group section of an RMSG: a count, then that many non-empty
// names. The list keeps only the names, and the count has been checked against them.
func (r *reader) queues() QueueList {
	n := r.uvarint()
	if r.err != "" {
		return nil
	}
	if n == 0 {
		r.err = "queues flagged but none"
		return nil
	}
	if n > MaxRouteQueues {
		r.err = fmt.Sprintf("%d queue groups, more than %d", n, MaxRouteQueues)
		return nil
	}
	start := r.b
	for range n {
		if q := r.str(); len(q) == 0 && r.err == "" {
			r.err = "empty queue group name"
		}
	}
	if r.err != "" {
		return nil
	}
	used := len(start) - len(r.b)
	return QueueList(start[:used:used])
}

// RHELLO flags.
const (
	// HelloAuth: the sender has the cluster secret and a nonce follows the client
	// URLs; right after RHELLO it sends RAUTH, and it refuses a peer that does not.
	// AppendRouteHello sets it exactly when the hello has a nonce.
	HelloAuth uint64 = 1 << 0
)

// Lengths of the route authentication fields.
const (
	// RouteNonceLen is the length of an RHELLO nonce: fresh random bytes per
	// connection.
	RouteNonceLen = 32
	// RouteAuthLen is the length of an RAUTH proof, an HMAC-SHA256.
	RouteAuthLen = 32
)

// RouteHello is the body of an RHELLO frame, the first frame each way on a route.
//
//	version u8 | flags uvarint | cluster str | node_name str | node_id str |
//	route_addr str | server_version str | client_url_count uvarint | client_url str… |
//	nonce str (HelloAuth)
type RouteHello struct {
	Version uint8
	// Flags: HelloAuth, the only bit defined in version 1. A receiver ignores bits
	// it does not know, so later versions can announce optional capabilities.
	Flags   uint64
	Cluster string // cluster name; a node refuses a route from another cluster
	// NodeName is the node's configured name, NodeID is random per process: a
	// restarted node has a new NodeID, which starts a new route session.
	NodeName      string
	NodeID        string
	RouteAddr     string // host:port other nodes dial to reach this node's routes
	ServerVersion string
	// ClientURLs are the node's client listener URLs, so that clients can learn
	// every node of the cluster from any one of them.
	ClientURLs []string
	// Nonce is the sender's challenge for this connection, RouteNonceLen random
	// bytes, present (with HelloAuth) when the sender has the cluster secret: the
	// peer's RAUTH proof covers it, so a proof is good for one connection only.
	Nonce []byte `json:",omitempty"`
}

// AppendRouteHello appends an RHELLO frame. The HelloAuth flag is set when h has a
// nonce and cleared otherwise, whatever h.Flags says.
func AppendRouteHello(dst []byte, h *RouteHello) []byte {
	flags := h.Flags &^ HelloAuth
	if len(h.Nonce) > 0 {
		flags |= HelloAuth
	}
	n := 1 + uvarintLen(flags) + strLen(h.Cluster) + strLen(h.NodeName) + strLen(h.NodeID) +
		strLen(h.RouteAddr) + strLen(h.ServerVersion) + uvarintLen(uint64(len(h.ClientURLs)))
	for _, u := range h.ClientURLs {
		n += strLen(u)
	}
	if len(h.Nonce) > 0 {
		n += strLen(h.Nonce)
	}
	dst = appendHead(dst, TypeRouteHello, n)
	dst = append(dst, h.Version)
	dst = binary.AppendUvarint(dst, flags)
	dst = appendStr(dst, h.Cluster)
	dst = appendStr(dst, h.NodeName)
	dst = appendStr(dst, h.NodeID)
	dst = appendStr(dst, h.RouteAddr)
	dst = appendStr(dst, h.ServerVersion)
	dst = binary.AppendUvarint(dst, uint64(len(h.ClientURLs)))
	for _, u := range h.ClientURLs {
		dst = appendStr(dst, u)
	}
	if len(h.Nonce) > 0 {
		dst = appendStr(dst, h.Nonce)
	}
	return dst
}

// ParseRouteHello parses an RHELLO body (Frame.Payload). Fields appended by later
// protocol versions are ignored. With HelloAuth the nonce must be there and
// RouteNonceLen bytes long; the returned hello holds a copy of it.
func ParseRouteHello(body []byte) (RouteHello, error) {
	r := reader{b: body}
	h := RouteHello{Version: r.byte(), Flags: r.uvarint()}
	h.Cluster = string(r.str())
	h.NodeName = string(r.str())
	h.NodeID = string(r.str())
	h.RouteAddr = string(r.str())
	h.ServerVersion = string(r.str())
	h.ClientURLs = r.urls("client URL")
	if h.Flags&HelloAuth != 0 {
		nonce := r.str()
		if r.err == "" && len(nonce) != RouteNonceLen {
			r.err = fmt.Sprintf("nonce of %d bytes, want %d", len(nonce), RouteNonceLen)
		}
		h.Nonce = append([]byte(nil), nonce...)
	}
	if r.err != "" {
		f := Frame{Type: TypeRouteHello}
		return RouteHello{}, f.malformed("%s", r.err)
	}
	return h, nil
}

// AppendRouteAuth appends an RAUTH frame carrying proof, RouteAuthLen bytes: the
// sender's proof that it has the cluster secret (docs/protocol.md, "Route
// authentication").
func AppendRouteAuth(dst, proof []byte) []byte {
	dst = appendHead(dst, TypeRouteAuth, len(proof))
	return append(dst, proof...)
}

// AppendRouteInterest appends an RINT frame: the sender has weight local subscriptions
// (plain, queue "") or members (queue group) for subject. Weight 0 withdraws the
// interest. The count is absolute, so sending it again changes nothing.
func AppendRouteInterest[S text](dst []byte, subject, queue S, weight uint32) []byte {
	var flags uint8
	n := 1 + strLen(subject) + uvarintLen(uint64(weight))
	if len(queue) > 0 {
		flags |= FlagQueue
		n += strLen(queue)
	}
	dst = appendHead(dst, TypeRouteInterest, n)
	dst = append(dst, flags)
	dst = appendStr(dst, subject)
	if len(queue) > 0 {
		dst = appendStr(dst, queue)
	}
	return binary.AppendUvarint(dst, uint64(weight))
}

// AppendRouteRefresh appends an RREFRESH frame; phase is RefreshBegin or RefreshEnd
// and generation is never 0.
func AppendRouteRefresh(dst []byte, phase uint8, generation uint64) []byte {
	dst = appendHead(dst, TypeRouteRefresh, 1+uvarintLen(generation))
	dst = append(dst, phase)
	return binary.AppendUvarint(dst, generation)
}

// AppendRouteAck appends an RACK frame: every RMSG with a sequence up to seq arrived.
func AppendRouteAck(dst []byte, seq uint64) []byte {
	dst = appendHead(dst, TypeRouteAck, uvarintLen(seq))
	return binary.AppendUvarint(dst, seq)
}

// AppendRouteRaft appends an RRAFT frame carrying batch, a non-empty batch of Raft
// messages in the replication layer's encoding.
func AppendRouteRaft(dst, batch []byte) []byte {
	dst = appendHead(dst, TypeRouteRaft, len(batch))
	return append(dst, batch...)
}

// RouteMsgLen is the encoded size of the RMSG frame AppendRouteMsg would write.
func RouteMsgLen[S, Q text](seq uint64, subject, route, reply S, queues []Q, header Header, payload []byte) int {
	n := routeMsgBodyLen(seq, subject, route, reply, queues, header, payload)
	return 1 + uvarintLen(uint64(n)) + n
}

func routeMsgBodyLen[S, Q text](seq uint64, subject, route, reply S, queues []Q, header Header, payload []byte) int {
	n := 2 + strLen(subject) + len(payload)
	if seq != 0 {
		n += uvarintLen(seq)
	}
	if len(route) > 0 {
		n += strLen(route)
	}
	if len(reply) > 0 {
		n += strLen(reply)
	}
	if len(queues) > 0 {
		n += uvarintLen(uint64(len(queues)))
		for _, q := range queues {
			n += strLen(q)
		}
	}
	if len(header) > 0 {
		n += strLen(header)
	}
	return n
}

// AppendRouteMsg appends an RMSG frame forwarding a message to another node. seq 0
// means the sender does not keep the message for retransmission; attrs holds the
// QoS and the Attr* bits. route, when not empty, is the subject the message is
// routed by instead of its own (a stream consumer's delivery to an inbox). queues
// names the groups the receiver was chosen for: at most MaxRouteQueues, each
// non-empty, and at least one with AttrGroupOnly.
func AppendRouteMsg[S, Q text](dst []byte, seq uint64, attrs uint8, subject, route, reply S, queues []Q, header Header, payload []byte) []byte {
	var flags uint8
	if seq != 0 {
		flags |= FlagSeq
	}
	if len(route) > 0 {
		flags |= FlagRoute
	}
	if len(reply) > 0 {
		flags |= FlagReply
	}
	if len(queues) > 0 {
		flags |= FlagQueues
	}
	if len(header) > 0 {
		flags |= FlagHeaders
	}
	dst = appendHead(dst, TypeRouteMsg, routeMsgBodyLen(seq, subject, route, reply, queues, header, payload))
	dst = append(dst, flags, attrs)
	if seq != 0 {
		dst = binary.AppendUvarint(dst, seq)
	}
	dst = appendStr(dst, subject)
	if len(route) > 0 {
		dst = appendStr(dst, route)
	}
	if len(reply) > 0 {
		dst = appendStr(dst, reply)
	}
	if len(queues) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(queues)))
		for _, q := range queues {
			dst = appendStr(dst, q)
		}
	}
	if len(header) > 0 {
		dst = appendStr(dst, header)
	}
	return append(dst, payload...)
}
