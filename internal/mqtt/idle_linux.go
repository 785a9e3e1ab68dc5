package mqtt

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An idle connection does not keep a goroutine blocked in Read: after
// Config.IdleAfter without a byte from its client (counted from its CONNECT too), its
// reader hands it to the server's poller and ends. The poller waits on all parked sockets in one epoll set
// and starts a reader again when one has something to read, is closed, or its
// keepalive runs out. A goroutine's stack is most of what an idle connection
// costs; Mosquitto keeps an idle client as a small struct in an epoll set, and so
// does this.
//
// Once its writer has stopped too, a parked connection also gives up its Go socket
// (dehydrate): the poller keeps a duplicate of the descriptor and closes the
// net.Conn, whose descriptor record, addresses and runtime poll record would
// otherwise stay with every idle client. Its next reader or writer builds a
// net.Conn again from the descriptor (rehydrate).
type poller struct {
	epfd int
	// wakeFD is an eventfd in the epoll set, written on close so that the wait
	// returns at once instead of at its next timeout.
	wakeFD int

	mu       sync.Mutex
	byFD     []*conn // parked or once parked, by socket descriptor (the kernel hands out the lowest free)
	nTracked int
	done     chan struct{}
	stopped  sync.WaitGroup
	closing  sync.Once
}

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("mqtt: idle poller: %w", err)
	}
	wakeFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("mqtt: idle poller: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakeFD), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakeFD, &ev); err != nil {
		_ = unix.Close(wakeFD)
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("mqtt: idle poller: %w", err)
	}
	p := &poller{epfd: epfd, wakeFD: wakeFD, done: make(chan struct{})}
	p.stopped.Add(2)
	go p.wait()
	go p.sweep()
	return p, nil
}

// fdOf returns the descriptor of a socket the poller can watch: over TLS, the
// socket under it.
func fdOf(c *conn) (int32, bool) {
	nc := c.nc
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok && c.tls && !c.ws {
		nc = u.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, false // WebSocket: its framing layer buffers; its reader stays
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := int32(-1)
	if rc.Control(func(d uintptr) { fd = int32(d) }) != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// park registers c, whose reader is at a packet boundary with nothing buffered, and
// reports whether it did: the caller's goroutine must then end without touching c.
func (p *poller) park(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.pollGone {
		return false
	}
	if c.fd < 0 {
		fd, ok := fdOf(c)
		if !ok {
			return false
		}
		c.fd = fd
	}
	// Parked before the socket is armed: an event, a close or the sweeper may
	// start the new reader at once, and exactly one of them does (unpark).
	c.parked.Store(true)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: c.fd, Pad: int32(c.id)}
	op := unix.EPOLL_CTL_MOD
	if !c.pollAdded {
		op = unix.EPOLL_CTL_ADD
	}
	if err := unix.EpollCtl(p.epfd, op, int(c.fd), &ev); err != nil {
		if c.parked.CompareAndSwap(true, false) {
			return false // the caller goes on reading
		}
		return true // someone already started the next reader
	}
	c.pollAdded = true
	p.setLocked(c.fd, c)
	return true
}

func (p *poller) atLocked(fd int32) *conn {
	if int(fd) < len(p.byFD) {
		return p.byFD[fd]
	}
	return nil
}

func (p *poller) setLocked(fd int32, c *conn) {
	if int(fd) >= len(p.byFD) {
		if c == nil {
			return
		}
		for len(p.byFD) <= int(fd) {
			p.byFD = append(p.byFD, nil)
		}
	}
	switch old := p.byFD[fd]; {
	case old == nil && c != nil:
		p.nTracked++
	case old != nil && c == nil:
		p.nTracked--
	}
	p.byFD[fd] = c
}

// parkedCount is how many connections wait without a reader now.
func (p *poller) parkedCount() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.byFD {
		if c == nil {
			continue
		}
		if c.parked.Load() {
			n++
		}
	}
	return n
}

// tracked is how many connections the poller holds, parked or not.
func (p *poller) tracked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nTracked
}

// forget drops c for good; called before its socket can be closed, so that its
// descriptor, once reused, is never taken for c.
func (p *poller) forget(c *conn) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c.pollGone = true
	if c.fd >= 0 && p.atLocked(c.fd) == c {
		p.setLocked(c.fd, nil)
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(c.fd), nil)
	}
}

func (p *poller) wait() {
	defer p.stopped.Done()
	events := make([]unix.EpollEvent, 256)
	for {
		// Closing an epoll descriptor does not end a wait on it: close writes
		// wakeFD, and the timeout is a backstop.
		n, err := unix.EpollWait(p.epfd, events, 500)
		select {
		case <-p.done:
			return
		default:
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			p.mu.Lock()
			c := p.atLocked(ev.Fd)
			p.mu.Unlock()
			if c != nil && int32(c.id) == ev.Pad {
				c.unpark()
			}
		}
	}
}

// sweep wakes parked connections whose keepalive has run out; their reader then
// finds the deadline passed and closes them as any reader would.
func (p *poller) sweep() {
	defer p.stopped.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var due []*conn
	for {
		select {
		case <-p.done:
			return
		case now := <-t.C:
			p.mu.Lock()
			for _, c := range p.byFD {
				if c == nil {
					continue
				}
				if c.link.KeepAlive > 0 && c.parked.Load() && now.After(c.keepAliveDeadline()) {
					due = append(due, c)
				}
			}
			p.mu.Unlock()
			for i, c := range due {
				c.unpark()
				due[i] = nil
			}
			due = due[:0]
		}
	}
}

// dehydrate closes the Go socket of a parked connection whose writer has stopped
// and watches a duplicate of its descriptor instead. Anyone may call it: it acts
// only if it can take the connection from the poller, and hands it back.
func (p *poller) dehydrate(c *conn) {
	if p == nil || !c.parked.CompareAndSwap(true, false) {
		return
	}
	c.mu.Lock()
	if !c.q.Closed() && c.q.Release(c.dropScratch) {
		if c.nc != nil {
			p.mu.Lock()
			p.detachLocked(c)
			p.mu.Unlock()
		}
	}
	c.mu.Unlock()
	if !p.park(c) {
		go c.resume()
		return
	}
	// A close while this held the connection found no one to start its reader.
	if c.q.Closed() {
		c.unpark()
	}
}

// detachLocked swaps c's net.Conn for a duplicate of its descriptor; on failure c
// keeps its socket. Called with c.mu and p.mu held, c parked and its writer off.
func (p *poller) detachLocked(c *conn) {
	if c.pollGone || c.fd < 0 || c.tls {
		return // crypto/tls keeps its connection's socket: it stays parked with it
	}
	dup, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return // out of descriptors: stay as is
	}
	p.unwatchLocked(c)
	_ = c.nc.Close() // the socket stays open through dup
	c.nc = nil
	c.fd = int32(dup)
	c.dormant = true
}

// unwatchLocked takes c's descriptor out of the epoll set, before it is closed.
func (p *poller) unwatchLocked(c *conn) {
	if c.pollAdded {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(c.fd), nil)
		c.pollAdded = false
	}
	if p.atLocked(c.fd) == c {
		p.setLocked(c.fd, nil)
	}
}

// rehydrate builds a net.Conn again for a dehydrated connection. Called with c.mu
// held and c.nc nil; on error the descriptor is closed and c has no socket.
func (p *poller) rehydrate(c *conn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.fd < 0 {
		return net.ErrClosed
	}
	f := os.NewFile(uintptr(c.fd), "mqtt")
	nc, err := net.FileConn(f) // on a descriptor of its own
	p.unwatchLocked(c)
	_ = f.Close()
	c.fd, c.dormant = -1, false
	if err != nil {
		return fmt.Errorf("mqtt: socket of an idle connection: %w", err)
	}
	c.nc = nc
	if !c.parked.Load() || c.pollGone {
		return nil
	}
	// Still waiting for its client (a writer woke it): watch the new descriptor.
	if fd, ok := fdOf(c); ok {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd, Pad: int32(c.id)}
		if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev) == nil {
			c.fd, c.pollAdded = fd, true
			p.setLocked(fd, c)
			return nil
		}
	}
	c.unpark() // cannot watch it: read instead
	return nil
}

// peerName is the remote address of a dormant connection's socket, "" if it has
// none. Called with c.mu held.
func (p *poller) peerName(c *conn) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.fd < 0 {
		return ""
	}
	sa, err := unix.Getpeername(int(c.fd))
	if err != nil {
		return ""
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return ""
}

// dormantCount is how many parked connections hold no Go socket now.
func (p *poller) dormantCount() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.byFD {
		if c == nil {
			continue
		}
		if c.parked.Load() && c.dormant {
			n++
		}
	}
	return n
}

// close ends the poller once its wait has returned.
func (p *poller) close() {
	if p == nil {
		return
	}
	p.closing.Do(func() {
		close(p.done)
		var one [8]byte
		one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes it
		_, _ = unix.Write(p.wakeFD, one[:])
		p.stopped.Wait()
		_ = unix.Close(p.epfd)
		_ = unix.Close(p.wakeFD)
	})
}
