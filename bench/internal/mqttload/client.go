// Package mqttload is the bench harnesses' MQTT 3.1.1 load client (bench/mqttvs,
// bench/mqttclustervs): built on Tern's MQTT codec, so every broker gets the same
// bytes. Writes are buffered and flushed when the writer would wait, so a busy
// publisher sends many packets per syscall, as production clients do.
package mqttload

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// Client is one MQTT 3.1.1 connection.
type Client struct {
	nc  net.Conn
	bw  *bufio.Writer
	r   *packet.Reader
	wm  sync.Mutex // guards bw and ack: acknowledgements are written from the reader
	ack []byte
	// SessionPresent is the CONNACK's flag: the server resumed a session it held.
	SessionPresent bool
}

// ErrClosed is returned by a publisher whose connection ended.
var ErrClosed = errors.New("connection closed")

// DialOptions are a connection's CONNECT fields and how it is made.
type DialOptions struct {
	ClientID string
	// Persistent asks for a persistent session (clean session off); the default is
	// a clean session.
	Persistent bool
	KeepAlive  uint16   // seconds; 0: none
	Local      net.Addr // the local address to connect from; nil: any
	Timeout    time.Duration
	// TLS, when set, makes the connection over TLS with this configuration (the
	// handshake is within Timeout too); nil: plain TCP.
	TLS *tls.Config
}

// Dial connects with a clean session and waits for the CONNACK.
func Dial(addr, id string, local net.Addr) (*Client, error) {
	return DialWith(addr, DialOptions{ClientID: id, Local: local})
}

// DialWith connects with the options given and waits (up to o.Timeout, 10 s by
// default) for the CONNACK; a refused CONNECT is an error.
func DialWith(addr string, o DialOptions) (*Client, error) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: timeout, LocalAddr: o.Local}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if o.TLS != nil {
		cfg := o.TLS
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			// Verify the certificate against the host dialled, as TLS clients do.
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				nc.Close()
				return nil, err
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tc
	}
	c := &Client{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), r: packet.NewReader(nc, 16<<20)}
	c.r.SetVersion(packet.V311)
	b, _ := packet.Append(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311,
		CleanStart: !o.Persistent, KeepAlive: o.KeepAlive, ClientID: o.ClientID}, packet.V311)
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	p, err := c.r.ReadPacket()
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	}
	ca, ok := p.(*packet.Connack)
	if !ok || ca.Reason != 0 {
		nc.Close()
		return nil, fmt.Errorf("CONNACK refused: %+v", p)
	}
	c.SessionPresent = ca.SessionPresent
	return c, nil
}

// Close closes the connection (without DISCONNECT).
func (c *Client) Close() { _ = c.nc.Close() }

// Subscribe subscribes to one filter and waits (10 s at most) for the SUBACK,
// skipping any other packet.
func (c *Client) Subscribe(filter string, qos byte) error {
	b, _ := packet.Append(nil, &packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: filter, QoS: qos}}}, packet.V311)
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetReadDeadline(time.Time{})
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			return fmt.Errorf("SUBACK: %w", err)
		}
		if sa, ok := p.(*packet.Suback); ok {
			if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
				return fmt.Errorf("subscription refused: %v", sa.Reasons)
			}
			return nil
		}
	}
}

// Publish sends count messages of size bytes to topic. With qos 1 it keeps at most
// window unacknowledged. When rate > 0 it paces to that many messages per second and
// stamps each payload with the send time for latency.
func (c *Client) Publish(topic string, qos byte, count, size, window int, rate float64, stop *atomic.Bool) error {
	return c.PublishWith(PublishOptions{Topic: topic, QoS: qos, Count: count, Size: size, Window: window, Rate: rate, Stop: stop})
}

// PublishOptions describe one publisher's run (Client.PublishWith).
type PublishOptions struct {
	Topic  string
	QoS    byte
	Count  int
	Size   int // payload bytes; at least 8 (16 with Seq)
	Window int // QoS 1 or 2 messages unacknowledged (no PUBACK, no PUBCOMP) at most
	// Rate paces the publisher to that many messages per second (0: as fast as it
	// goes). A paced publisher always stamps.
	Rate float64
	Stop *atomic.Bool // when set, the publisher stops at the next message
	// Stamp puts the send time (Unix ns, little endian) in the first 8 bytes of
	// every payload.
	Stamp bool
	// Seq puts each message's number (FirstSeq, FirstSeq+1, ...) in bytes 8–15 of
	// its payload (little endian); see Stamped.
	Seq      bool
	FirstSeq uint64
	// OnSent is called with a message's number and its time (as stamped);
	// OnAck (QoS 1 and 2) with its number and the time its PUBACK or PUBCOMP was
	// read. Each is called from one goroutine (OnAck from the connection's reader).
	OnSent func(seq uint64, at time.Time)
	OnAck  func(seq uint64, at time.Time)
	// AckTimeout bounds the wait for the last acknowledgements once every message
	// is written, and for a window slot (default 30 s).
	AckTimeout time.Duration
	// Start is when a paced publisher's first new message is due (the zero time:
	// at once); the i-th is due i/Rate later.
	Start time.Time
	// Resend are numbers of messages sent before (on a connection that broke before
	// their PUBACK came) to send again first, unpaced, before the Count new ones.
	Resend []uint64
}

// Stamped reads the send time and the message number of a payload written with
// Stamp and Seq.
func Stamped(payload []byte) (sent time.Time, seq uint64, ok bool) {
	if len(payload) < 16 {
		return time.Time{}, 0, false
	}
	return time.Unix(0, int64(binary.LittleEndian.Uint64(payload))), binary.LittleEndian.Uint64(payload[8:]), true
}

// PublishWith runs one publisher (see PublishOptions). It returns the first error of
// the connection (a read error ends it at the next message or window wait).
func (c *Client) PublishWith(o PublishOptions) error {
	minSize := 8
	if o.Seq {
		minSize = 16
	}
	payload := make([]byte, max(o.Size, minSize))
	pub := &packet.Publish{QoS: o.QoS, Topic: o.Topic, Payload: payload}
	ackTimeout := o.AckTimeout
	if ackTimeout <= 0 {
		ackTimeout = 30 * time.Second
	}
	stop := o.Stop
	if stop == nil {
		stop = new(atomic.Bool)
	}
	// pending[packet id] is the number of the message sent under it, for OnAck; the
	// window is far below 65,535, so an id is not reused while its message is out.
	var pending []atomic.Uint64
	if o.OnAck != nil && o.QoS > 0 {
		pending = make([]atomic.Uint64, 1<<16)
	}
	var sem chan struct{}
	readErr := make(chan error, 1)
	if o.QoS > 0 {
		sem = make(chan struct{}, o.Window)
		go func() {
			for {
				p, err := c.r.ReadPacket()
				if err != nil {
					readErr <- err
					return
				}
				a, ok := p.(*packet.Ack)
				if !ok {
					continue
				}
				switch a.Type {
				case packet.TypePubrec: // QoS 2: released at once
					if err := c.writeAck(packet.TypePubrel, a.PacketID, true); err != nil {
						readErr <- err
						return
					}
				case packet.TypePuback, packet.TypePubcomp: // the end of a QoS 1 or 2 flow
					if pending != nil {
						o.OnAck(pending[a.PacketID].Load(), time.Now())
					}
					select {
					case <-sem:
					default: // an acknowledgement of nothing outstanding: ignored
					}
				}
			}
		}()
	}
	buf := make([]byte, 0, 2*len(payload)+64)
	start := o.Start
	if start.IsZero() {
		start = time.Now()
	}
	stamp := o.Stamp || o.Rate > 0
	var pid uint16
	for j := 0; j < len(o.Resend)+o.Count && !stop.Load(); j++ {
		i := j - len(o.Resend) // the new message's index; < 0: a resend
		var seq uint64
		if i < 0 {
			seq = o.Resend[j]
		} else {
			seq = o.FirstSeq + uint64(i)
		}
		if o.Rate > 0 && i >= 0 {
			due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				if err := c.flush(); err != nil {
					return err
				}
				time.Sleep(wait)
			}
		}
		// A paced message's time is taken before it waits for a window slot, so its
		// latency includes that wait; an unpaced one's when it is written.
		now := time.Now()
		if o.QoS > 0 {
			select {
			case err := <-readErr:
				return err
			default:
			}
			select {
			case sem <- struct{}{}:
			default:
				if err := c.flush(); err != nil {
					return err
				}
				select {
				case sem <- struct{}{}:
				case err := <-readErr:
					return err
				case <-time.After(ackTimeout):
					return fmt.Errorf("no acknowledgement for %v with %d unacknowledged", ackTimeout, o.Window)
				}
				if o.Rate <= 0 {
					now = time.Now()
				}
			}
			pid++
			if pid == 0 {
				pid = 1
			}
			pub.PacketID = pid
		}
		if o.Seq {
			binary.LittleEndian.PutUint64(payload[8:], seq)
		}
		if pending != nil {
			pending[pid].Store(seq)
		}
		if stamp {
			binary.LittleEndian.PutUint64(payload, uint64(now.UnixNano()))
		}
		buf = packet.AppendPublish(buf[:0], pub, packet.V311)
		c.wm.Lock()
		_, err := c.bw.Write(buf)
		c.wm.Unlock()
		if err != nil {
			return err
		}
		if o.OnSent != nil {
			o.OnSent(seq, now)
		}
	}
	if err := c.flush(); err != nil {
		return err
	}
	if o.QoS > 0 { // wait for the last acknowledgements
		for range o.Window {
			select {
			case sem <- struct{}{}:
			case err := <-readErr:
				return err
			case <-time.After(ackTimeout):
				return errors.New("acknowledgements stopped coming")
			}
		}
	}
	return nil
}

// Receive counts messages until the connection closes, acknowledging QoS 1 ones.
// latency, when set, gets the end-to-end delay of each stamped message.
func (c *Client) Receive(got *atomic.Int64, last *atomic.Int64, latency func(time.Duration)) error {
	return c.ReceiveFunc(func(p *packet.Publish, now time.Time) {
		if latency != nil && len(p.Payload) >= 8 {
			latency(now.Sub(time.Unix(0, int64(binary.LittleEndian.Uint64(p.Payload)))))
		}
		got.Add(1)
		last.Store(now.UnixNano())
	})
}

// ReceiveFunc hands every PUBLISH to h (with the time it was read; the packet is
// valid only during the call) and then acknowledges it: PUBACK for QoS 1, PUBREC
// for QoS 2 (and PUBCOMP for each PUBREL), until the connection ends. A QoS 2
// message the server sends again before its PUBREL is handed to h again.
func (c *Client) ReceiveFunc(h func(p *packet.Publish, now time.Time)) error {
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *packet.Publish:
			h(p, time.Now())
			switch p.QoS {
			case 1:
				err = c.writeAck(packet.TypePuback, p.PacketID, !c.r.Ready())
			case 2:
				err = c.writeAck(packet.TypePubrec, p.PacketID, !c.r.Ready())
			}
		case *packet.Ack:
			if p.Type == packet.TypePubrel {
				err = c.writeAck(packet.TypePubcomp, p.PacketID, !c.r.Ready())
			}
		}
		if err != nil {
			return err
		}
	}
}

// writeAck writes one acknowledgement, flushed when flush is set.
func (c *Client) writeAck(t packet.Type, id uint16, flush bool) error {
	c.wm.Lock()
	defer c.wm.Unlock()
	c.ack, _ = packet.Append(c.ack[:0], &packet.Ack{Type: t, PacketID: id}, packet.V311)
	_, err := c.bw.Write(c.ack)
	if err == nil && flush {
		err = c.bw.Flush()
	}
	return err
}

// flush writes what the publisher buffered.
func (c *Client) flush() error {
	c.wm.Lock()
	defer c.wm.Unlock()
	return c.bw.Flush()
}
