package packet

import (
	"bytes"
	"testing"
)

// benchPublish is a typical sensor reading.
func benchPublish(qos byte, v byte) *Publish {
	p := &Publish{QoS: qos, Topic: "sensors/k1/temp", Payload: make([]byte, 32)}
	if qos > 0 {
		p.PacketID = 1
	}
	if v == V5 {
		p.Props = Properties{MessageExpiry: 60, HasMessageExpiry: true, ContentType: "application/json"}
	}
	return p
}

func BenchmarkReadPublish(b *testing.B) {
	for _, c := range []struct {
		name   string
		qos, v byte
	}{{"QoS0/3.1.1", 0, V311}, {"QoS0/5", 0, V5}, {"QoS1/5", 1, V5}} {
		b.Run(c.name, func(b *testing.B) {
			one := encodeAll(b, c.v, benchPublish(c.qos, c.v))
			stream := bytes.Repeat(one, 1024)
			src := bytes.NewReader(stream)
			r := NewReader(src, 1<<20)
			r.SetVersion(c.v)
			b.ReportAllocs()
			b.SetBytes(int64(len(one)))
			for b.Loop() {
				if _, err := r.ReadPacket(); err != nil {
					src.Reset(stream)
					if _, err := r.ReadPacket(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func BenchmarkAppendPublish(b *testing.B) {
	for _, c := range []struct {
		name   string
		qos, v byte
	}{{"QoS0/3.1.1", 0, V311}, {"QoS1/5", 1, V5}} {
		b.Run(c.name, func(b *testing.B) {
			p := benchPublish(c.qos, c.v)
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			b.SetBytes(int64(Size(p, c.v)))
			for b.Loop() {
				buf = AppendPublish(buf[:0], p, c.v)
			}
		})
	}
}

func BenchmarkAppendAck(b *testing.B) {
	a := &Ack{Type: TypePuback, PacketID: 7}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Append(buf[:0], a, V5)
	}
}

func BenchmarkDecodeConnect(b *testing.B) {
	enc := encodeAll(b, V5, samples(V5)[0])
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, _, err := Decode(enc, 0); err != nil {
			b.Fatal(err)
		}
	}
}
