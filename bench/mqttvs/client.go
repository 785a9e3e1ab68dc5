package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tern-mq/tern/internal/mqtt/packet"
)

// client is the load generator's MQTT 3.1.1 client: the same bytes go to every
// broker. Writes are buffered and flushed when the writer would wait, so a busy
// publisher sends many packets per syscall, as production clients do.
type client struct {
	nc net.Conn
	bw *bufio.Writer
	r  *packet.Reader
	wm sync.Mutex // guards bw for subscribers acknowledging from their reader
}

var errClosed = errors.New("connection closed")

func dial(addr, id string, local net.Addr) (*client, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: local}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &client{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10), r: packet.NewReader(nc, 16<<20)}
	c.r.SetVersion(packet.V311)
	b, _ := packet.Append(nil, &packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311, CleanStart: true, ClientID: id}, packet.V311)
	if _, err := nc.Write(b); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := c.r.ReadPacket()
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	}
	if ca, ok := p.(*packet.Connack); !ok || ca.Reason != 0 {
		nc.Close()
		return nil, fmt.Errorf("CONNACK refused: %+v", p)
	}
	return c, nil
}

func (c *client) close() { _ = c.nc.Close() }

func (c *client) subscribe(filter string, qos byte) error {
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

// publisher sends count messages of size bytes to topic. With qos 1 it keeps at most
// window unacknowledged. When rate > 0 it paces to that many messages per second and
// stamps each payload with the send time for latency.
func (c *client) publish(topic string, qos byte, count, size, window int, rate float64, stop *atomic.Bool) error {
	payload := make([]byte, max(size, 8))
	pub := &packet.Publish{QoS: qos, Topic: topic, Payload: payload}
	var sem chan struct{}
	readErr := make(chan error, 1)
	if qos > 0 {
		sem = make(chan struct{}, window)
		go func() {
			for {
				p, err := c.r.ReadPacket()
				if err != nil {
					readErr <- err
					return
				}
				if a, ok := p.(*packet.Ack); ok && a.Type == packet.TypePuback {
					<-sem
				}
			}
		}()
	}
	buf := make([]byte, 0, 2*size+64)
	start := time.Now()
	var pid uint16
	for i := 0; i < count && !stop.Load(); i++ {
		if rate > 0 {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				if err := c.bw.Flush(); err != nil {
					return err
				}
				time.Sleep(wait)
			}
			binary.LittleEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		}
		if qos > 0 {
			select {
			case sem <- struct{}{}:
			default:
				if err := c.bw.Flush(); err != nil {
					return err
				}
				select {
				case sem <- struct{}{}:
				case err := <-readErr:
					return err
				}
			}
			pid++
			if pid == 0 {
				pid = 1
			}
			pub.PacketID = pid
		}
		buf = packet.AppendPublish(buf[:0], pub, packet.V311)
		if _, err := c.bw.Write(buf); err != nil {
			return err
		}
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	if qos > 0 { // wait for the last acknowledgements
		for range window {
			select {
			case sem <- struct{}{}:
			case err := <-readErr:
				return err
			case <-time.After(30 * time.Second):
				return errors.New("acknowledgements stopped coming")
			}
		}
	}
	return nil
}

// receive counts messages until the connection closes, acknowledging QoS 1 ones.
// latency, when set, gets the end-to-end delay of each stamped message.
func (c *client) receive(got *atomic.Int64, last *atomic.Int64, latency func(time.Duration)) error {
	var ack []byte
	for {
		p, err := c.r.ReadPacket()
		if err != nil {
			return err
		}
		pub, ok := p.(*packet.Publish)
		if !ok {
			continue
		}
		now := time.Now()
		if latency != nil && len(pub.Payload) >= 8 {
			latency(now.Sub(time.Unix(0, int64(binary.LittleEndian.Uint64(pub.Payload)))))
		}
		got.Add(1)
		last.Store(now.UnixNano())
		if pub.QoS > 0 {
			ack, _ = packet.Append(ack[:0], &packet.Ack{Type: packet.TypePuback, PacketID: pub.PacketID}, packet.V311)
			c.wm.Lock()
			_, err = c.bw.Write(ack)
			if err == nil && !c.r.Ready() {
				err = c.bw.Flush()
			}
			c.wm.Unlock()
			if err != nil {
				return err
			}
		}
	}
}
