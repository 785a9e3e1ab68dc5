package arq

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestDecodeRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":            {},
		"bad version":      {0x21},
		"reserved flag":    {version | 0x08},
		"data without seq": {version | flagData},
		"seq zero":         {version | flagData, 0},
		"frames, no data":  {version | flagAck, 1, 1, 0, 0, 0, 0, 0x03},
		"ack cut":          {version | flagAck, 1},
		"too many ranges":  {version | flagAck, 1, 1, 0, 0, 0, 200},
		"empty range":      {version | flagAck, 1, 1, 0, 0, 0, 1, 0, 0},
		"frame flags":      {version | flagData, 1, 0x08, 0},
		"pad with flags":   {version | flagData, 1, framePad | frameFirst, 0},
		"frame overruns":   {version | flagData, 1, 0x03, 5, 'a'},
		"varint overlong":  {version | flagData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := decodeHeader(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// TestMalformedChangesNothing: a refused datagram leaves the endpoint as it was.
func TestMalformedChangesNothing(t *testing.T) {
	e := New(Config{})
	now := time.Unix(0, 0)
	if err := e.Receive(now, []byte{version | flagData, 1, 0x03, 9, 'x'}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v", err)
	}
	out, del := e.Output()
	if len(out) != 0 || len(del) != 0 || !e.Idle() || e.cum != 1 {
		t.Fatalf("state changed: out %d delivered %d cum %d", len(out), len(del), e.cum)
	}
}

// FuzzReceive: any datagram is refused or applied without panicking, and the
// endpoint keeps its invariants (in-order delivery never runs backwards).
func FuzzReceive(f *testing.F) {
	a, b := New(Config{BundleDelay: -1}), New(Config{BundleDelay: -1})
	now := time.Unix(0, 0)
	_ = a.Send(now, []byte("hello"))
	_ = a.Send(now, make([]byte, 3000))
	out, _ := a.Output()
	for _, d := range out {
		f.Add(d)
		_ = b.Receive(now, d)
	}
	acks, _ := b.Output()
	for _, d := range acks {
		f.Add(d)
	}
	f.Add([]byte{version | flagAck, 5, 10, 0, 3, 0, 2, 1, 1, 4, 2})
	f.Add([]byte{version | flagData, 1, frameFirst | frameLast, 1, 'x', framePad, 2, 0, 0})
	f.Fuzz(func(t *testing.T, d []byte) {
		e := New(Config{})
		_ = e.Send(now, []byte("x"))
		before := e.cum
		_ = e.Receive(now.Add(time.Millisecond), d)
		e.Tick(now.Add(time.Second))
		if e.cum < before || e.peerCum > e.nextSeq {
			t.Fatalf("invariants broken: cum %d→%d, peerCum %d nextSeq %d", before, e.cum, e.peerCum, e.nextSeq)
		}
		_, _ = e.Output()
	})
}

// TestFullDatagramsExactlyMTU: a backlog leaves in datagrams of exactly the MTU
// (padded), which segmentation offload needs, and the padding never reaches the
// application.
func TestFullDatagramsExactlyMTU(t *testing.T) {
	a, b := New(Config{}), New(Config{})
	now := time.Unix(0, 0)
	var want []byte
	for i := range 14 { // within the initial congestion window
		m := bytes.Repeat([]byte{byte('a' + i)}, 1000)
		want = append(want, m...)
		if err := a.Send(now, m); err != nil {
			t.Fatal(err)
		}
	}
	a.Tick(now.Add(10 * time.Millisecond)) // the bundling delay of the rest
	out, _ := a.Output()
	if len(out) < 10 {
		t.Fatalf("%d datagrams for 14 KB", len(out))
	}
	var got []byte
	for i, d := range out {
		if i < len(out)-1 && len(d) != a.cfg.MTU {
			t.Fatalf("datagram %d of %d: %d bytes, want the MTU %d", i, len(out), len(d), a.cfg.MTU)
		}
		if err := b.Receive(now, d); err != nil {
			t.Fatal(err)
		}
		_, del := b.Output()
		for _, m := range del {
			got = append(got, m...)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("delivered %d bytes, want %d", len(got), len(want))
	}
}
