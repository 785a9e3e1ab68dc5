package membership

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"
)

func sampleMeta() meta {
	return meta{
		format:  metaFormat,
		cluster: "prod-eu",
		id:      "W3DTQ2IES3R37TU6U5ZA54GCGE",
		route:   "10.0.0.7:7401",
		version: "0.1.0-dev",
		tags:    map[string]string{"zone": "eu-west-1a", "rack": "r12", "ünïcode": "✓"},
		raftID:  0x9e3779b97f4a7c15,
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []meta{
		sampleMeta(),
		{format: metaFormat, id: "x"},
		{format: metaFormat, id: "x", leaving: true, tags: map[string]string{"k": ""}},
	} {
		b, err := encodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMeta(b)
		if err != nil {
			t.Fatalf("decode %x: %v", b, err)
		}
		if got.format != m.format || got.leaving != m.leaving || got.cluster != m.cluster || got.id != m.id ||
			got.route != m.route || got.version != m.version || !maps.Equal(got.tags, m.tags) {
			t.Fatalf("round trip: %+v, want %+v", got, m)
		}
		again, _ := encodeMeta(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	}
}

// Tags encode in key order whatever the map's order, so unchanged metadata never
// looks like an update to memberlist.
func TestMetaEncodingIsDeterministic(t *testing.T) {
	m := sampleMeta()
	for i := 0; i < 50; i++ {
		m.tags[strings.Repeat("k", i%7+1)] = "v"
	}
	first, err := encodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		m.tags = maps.Clone(m.tags)
		b, _ := encodeMeta(m)
		if !bytes.Equal(b, first) {
			t.Fatal("same metadata encoded two ways")
		}
	}
}

func TestMetaSizeLimit(t *testing.T) {
	m := sampleMeta()
	m.tags = map[string]string{}
	b, _ := encodeMeta(m)
	// Fill up to exactly MaxMetaSize with one tag, then one byte more.
	room := MaxMetaSize - len(b) - 2 - 1
	for _, extra := range []int{0, 1} {
		m.tags = map[string]string{"a": strings.Repeat("x", room-maxField+extra), "b": strings.Repeat("y", maxField-3)}
		b, err := encodeMeta(m)
		switch {
		case extra == 0 && (err != nil || len(b) != MaxMetaSize):
			t.Fatalf("at the limit: %d bytes, %v", len(b), err)
		case extra == 1 && !errors.Is(err, ErrMetaTooLarge):
			t.Fatalf("one byte over: %v", err)
		}
	}
	m.tags = map[string]string{"long": strings.Repeat("x", maxField+1)}
	if _, err := encodeMeta(m); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("256-byte value: %v", err)
	}
}

func TestDecodeMetaRejectsMalformed(t *testing.T) {
	good, _ := encodeMeta(sampleMeta())
	newer := append([]byte{metaFormat + 1}, good[1:]...)
	newer = append(newer, 9, 9, 9) // fields a later format appended
	if m, err := decodeMeta(newer); err != nil || m.id != sampleMeta().id || m.raftID != sampleMeta().raftID {
		t.Fatalf("newer format: %+v %v", m, err)
	}
	// Format 1, before the raft id: read as a node that replicates nothing.
	v1 := append([]byte{1}, good[1:len(good)-9]...)
	if m, err := decodeMeta(v1); err != nil || m.id != sampleMeta().id || m.raftID != 0 {
		t.Fatalf("format 1: %+v %v", m, err)
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"format 0":       append([]byte{0}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"header only":    {1, 0},
		"unknown flag":   append([]byte{metaFormat, 4}, good[2:]...),
		"v1 meta flag":   append([]byte{1, 2}, good[2:len(good)-9]...),
		"long raft id":   append(append([]byte{}, good[:len(good)-9]...), 0x80, 0x00),
		"no raft id":     good[:len(good)-9],
		"trailing":       append(append([]byte{}, good...), 0),
		"empty id":       {1, 0, 0, 0, 0, 0, 0},
		"length past":    {1, 0, 200, 'a'},
		"bad utf-8":      {1, 0, 1, 0xff, 1, 'x', 0, 0, 0},
		"no tag count":   {1, 0, 0, 1, 'x', 0, 0},
		"empty tag key":  {1, 0, 0, 1, 'x', 0, 0, 1, 0, 0},
		"unordered tags": {1, 0, 0, 1, 'x', 0, 0, 2, 1, 'b', 0, 1, 'a', 0},
		"duplicate tags": {1, 0, 0, 1, 'x', 0, 0, 2, 1, 'a', 0, 1, 'a', 0},
		"missing tags":   {1, 0, 0, 1, 'x', 0, 0, 3, 1, 'a', 0},
		"too long":       bytes.Repeat([]byte{1}, MaxMetaSize+1),
	} {
		if _, err := decodeMeta(b); !errors.Is(err, errBadMeta) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDecodeMeta feeds the decoder what another node might send. It must never
// panic; whatever it accepts in the current format must encode back to the same
// bytes, and whatever it accepts in a newer one must survive a round trip.
func FuzzDecodeMeta(f *testing.F) {
	good, _ := encodeMeta(sampleMeta())
	f.Add(good)
	leaving := sampleMeta()
	leaving.leaving = true
	b, _ := encodeMeta(leaving)
	f.Add(b)
	withMeta := sampleMeta()
	withMeta.metaGroup = true
	b, _ = encodeMeta(withMeta)
	f.Add(b)
	b, _ = encodeMeta(meta{format: metaFormat, id: "x"})
	f.Add(b)
	f.Add(append(append([]byte{3}, good[1:]...), 1, 2, 3))
	f.Add(good[:len(good)-1])
	f.Add([]byte{})
	f.Add([]byte{1, 0, 200, 'a'})
	f.Add([]byte{1, 0, 0, 1, 'x', 0, 0, 2, 1, 'b', 0, 1, 'a', 0})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, errBadMeta) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		out, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("accepted %x but cannot encode it: %v", b, err)
		}
		if m.format == metaFormat && !bytes.Equal(out, b) {
			t.Fatalf("accepted %x, encodes as %x", b, out)
		}
		again, err := decodeMeta(out)
		if err != nil || again.id != m.id || again.cluster != m.cluster || again.raftID != m.raftID || again.metaGroup != m.metaGroup || !maps.Equal(again.tags, m.tags) {
			t.Fatalf("round trip of %x: %+v %v", b, again, err)
		}
	})
}
