package udp

import (
	"net"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// socketBuffer is the send and receive buffer a session socket asks for: a burst
// that outruns the reader for a moment waits in the kernel instead of being lost.
// The kernel caps it at net.core.rmem_max / wmem_max.
const socketBuffer = 4 << 20

func setBuffers(pc *net.UDPConn) {
	_ = pc.SetReadBuffer(socketBuffer)
	_ = pc.SetWriteBuffer(socketBuffer)
}

// batchConn reads and writes many datagrams per system call (recvmmsg, sendmmsg
// on Linux; one per call where the platform has no such call).
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

func newBatchConn(pc *net.UDPConn) batchConn {
	if a, ok := pc.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		return ipv4.NewPacketConn(pc)
	}
	return ipv6.NewPacketConn(pc)
}

// readBatch is the receive side's reusable batch: batch messages of up to size
// bytes each. With receive offload (gro) one message may hold a run of datagrams
// from one sender, all of one size but the last.
type readBatch struct {
	ms   []ipv4.Message
	size int
	gro  bool
}

// newReadBatch makes the read batch for pc, asking the kernel to coalesce
// datagrams of one flow where it can (UDP GRO): a bulk stream sent with
// segmentation offload then crosses the receive path as one message per send.
func newReadBatch(pc *net.UDPConn, n, mtu int) *readBatch {
	// Room for a peer whose MTU is up to twice ours; a datagram that fills the
	// buffer may have been cut and is dropped.
	size := max(4096, 2*mtu)
	gro := enableGRO(pc)
	if gro {
		size = readMax
	}
	rb := &readBatch{ms: make([]ipv4.Message, n), size: size, gro: gro}
	for i := range rb.ms {
		rb.ms[i].Buffers = [][]byte{make([]byte, size)}
		if gro {
			rb.ms[i].OOB = make([]byte, groControlSpace)
		}
	}
	return rb
}

// message returns the i-th message read and the size of the datagrams in it
// (the last may be shorter); nil if it may have been truncated.
func (rb *readBatch) message(i int) (b []byte, seg int) {
	m := &rb.ms[i]
	if m.N >= rb.size || m.N == 0 {
		return nil, 0
	}
	b, seg = m.Buffers[0][:m.N], m.N
	if rb.gro {
		if g := groSegment(m.OOB[:m.NN]); g > 0 && g < m.N {
			seg = g
		}
	}
	return b, seg
}

// writeBatch sends datagrams, each behind the same session header, to addr: many
// per system call, and a run of equal-sized ones (full datagrams, which the ARQ
// pads to exactly the MTU) as one segmentation-offload send where the kernel
// has it.
type writeBatch struct {
	ms     []ipv4.Message
	starts []int // the first datagram of each message
	bufs   [][]byte
	noGSO  bool           // the kernel refused segmentation offload on this socket
	gso    map[int][]byte // control messages by segment size
}

// gsoMaxBytes bounds one offloaded send: a UDP payload is at most 65507 bytes.
const gsoMaxBytes = 65000

// send writes datagrams; offload says whether runs of equal datagrams may leave as
// one segmentation-offload send. Callers turn it off while the path loses
// packets: a path that drops a whole offloaded run at once (a queue that drops
// per skb, as iptables and some virtual links do) turns one loss into dozens.
func (wb *writeBatch) send(bc batchConn, hdr []byte, datagrams [][]byte, addr net.Addr, offload bool) {
	n := len(datagrams)
	if cap(wb.ms) < n {
		wb.ms = make([]ipv4.Message, n)
		wb.starts = make([]int, n)
		wb.bufs = make([][]byte, 2*n)
	}
	ms := wb.ms[:0]
	starts := wb.starts[:0]
	for i := 0; i < n; {
		size := len(hdr) + len(datagrams[i])
		j := i + 1
		// A run of datagrams of one size, the last possibly shorter, goes as one.
		for offload && !wb.noGSO && j < n && j-i < gsoMaxSegments && (j-i+1)*size <= gsoMaxBytes && len(hdr)+len(datagrams[j]) <= size {
			j++
			if len(hdr)+len(datagrams[j-1]) < size {
				break
			}
		}
		b := wb.bufs[2*i : 2*j : 2*j]
		for k := i; k < j; k++ {
			b[2*(k-i)], b[2*(k-i)+1] = hdr, datagrams[k]
		}
		m := ipv4.Message{Buffers: b, Addr: addr}
		if j-i > 1 {
			m.OOB = wb.control(size)
		}
		ms = append(ms, m)
		starts = append(starts, i)
		i = j
	}
	for sent := 0; sent < len(ms); {
		k, err := bc.WriteBatch(ms[sent:], 0)
		if err != nil {
			if ms[sent].OOB != nil && !wb.noGSO {
				// No offload here after all: send the rest one by one.
				wb.noGSO = true
				wb.send(bc, hdr, datagrams[starts[sent]:], addr, false)
				break
			}
			// A full socket buffer or an unreachable peer: what was not sent
			// counts as lost, and the ARQ resends it.
			break
		}
		sent += k
	}
	clear(wb.bufs[:2*n])
	for i := range ms {
		wb.ms[i] = ipv4.Message{}
	}
}

func (wb *writeBatch) control(size int) []byte {
	c, ok := wb.gso[size]
	if !ok {
		if c = gsoControl(size); c == nil {
			wb.noGSO = true
		}
		if wb.gso == nil {
			wb.gso = make(map[int][]byte)
		}
		wb.gso[size] = c
	}
	return c
}
