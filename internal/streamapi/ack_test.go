package streamapi

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// within reports whether sub lies inside buf's memory: ParseAckSubject and
// ParseAckBody promise to return views of their input, not copies.
func within(sub, buf []byte) bool {
	if len(sub) == 0 {
		return false
	}
	for i := 0; i+len(sub) <= len(buf); i++ {
		if &buf[i] == &sub[0] {
			return true
		}
	}
	return false
}

func TestAckSubjectRoundTrip(t *testing.T) {
	for _, m := range []AckMeta{
		{Stream: "ORDERS", Consumer: "worker", Partition: 0, Deliveries: 1, StreamSeq: 1, ConsumerSeq: 1, Time: 1700000000123456789, Pending: 0},
		{Stream: "S", Consumer: "c-1_x", Partition: 1 << 20, Deliveries: 1<<64 - 1, StreamSeq: 1<<64 - 1, ConsumerSeq: 7, Time: -5, Pending: 99},
		{Stream: "a", Consumer: "b", Time: -1 << 63, Pending: 1<<64 - 1},
		{Stream: "a", Consumer: "b", Time: 1<<63 - 1},
		// Names are one subject token each; any byte but '.' survives the trip.
		{Stream: "s*>", Consumer: "c d\x00é", Partition: 3},
	} {
		subj := AppendAckSubject([]byte("junk"), &m)[len("junk"):]
		r, err := ParseAckSubject(subj)
		if err != nil {
			t.Fatalf("ParseAckSubject(%q): %v", subj, err)
		}
		if got := r.Meta(); got != m {
			t.Fatalf("round trip of %q: got %+v, want %+v", subj, got, m)
		}
		if !within(r.Stream, subj) || !within(r.Consumer, subj) {
			t.Fatalf("ParseAckSubject(%q) copied the names", subj)
		}
	}
}

func TestParseAckSubjectAllocs(t *testing.T) {
	m := AckMeta{Stream: "ORDERS", Consumer: "worker", Partition: 2, Deliveries: 1, StreamSeq: 42, ConsumerSeq: 40, Time: 1700000000123456789, Pending: 5}
	subj := AppendAckSubject(nil, &m)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseAckSubject(subj) }); n != 0 {
		t.Fatalf("ParseAckSubject allocates %v times; the ack path relies on it not allocating", n)
	}
}

// Numbers are read leniently: leading zeros are accepted, so the format is not
// canonical and a parsed subject re-encodes without them.
func TestParseAckSubjectLeadingZeros(t *testing.T) {
	r, err := ParseAckSubject([]byte("$TERN.ACK.a.b.007.01.002.0003.00.000"))
	if err != nil {
		t.Fatal(err)
	}
	want := AckMeta{Stream: "a", Consumer: "b", Partition: 7, Deliveries: 1, StreamSeq: 2, ConsumerSeq: 3}
	if got := r.Meta(); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestParseAckSubjectRejects(t *testing.T) {
	for _, s := range []string{
		"", "$TERN.ACK", "$TERN.ACK.", "$TERN.ACKS.a.b.0.1.2.3.4.5",
		"$tern.ack.a.b.0.1.2.3.4.5",                     // the prefix is case-sensitive
		"$TERN.ACK.a.b.0.1.2.3.4",                       // one number short
		"$TERN.ACK.a.b.0.1.2.3.4.5.6",                   // one too many
		"$TERN.ACK.a.b.0.1.2.3.4.5.",                    // trailing dot
		"$TERN.ACK..b.0.1.2.3.4.5",                      // empty stream
		"$TERN.ACK.a..0.1.2.3.4.5",                      // empty consumer
		"$TERN.ACK.a.b.0..2.3.4.5",                      // empty number
		"$TERN.ACK.a.b.0.1.2.3.4.",                      // empty last number
		"$TERN.ACK.a.b.x.1.2.3.4.5",                     // partition not a number
		"$TERN.ACK.a.b.0.1.2.3.4.-5",                    // sign
		"$TERN.ACK.a.b.0.1.+2.3.4.5",                    // sign
		"$TERN.ACK.a.b.0.1.2.3.4.5 ",                    // trailing space
		"$TERN.ACK.a.b.0x1.1.2.3.4.5",                   // hex
		"$TERN.ACK.a.b.1048577.1.2.3.4.5",               // partition beyond 2^20
		"$TERN.ACK.a.b.0.18446744073709551616.2.3.4.5",  // 2^64
		"$TERN.ACK.a.b.0.99999999999999999999.2.3.4.5",  // 20 digits, beyond 2^64
		"$TERN.ACK.a.b.0.000000000000000000001.2.3.4.5", // 21 digits, even if small
		"OTHER.ACK.a.b.0.1.2.3.4.5",
	} {
		if r, err := ParseAckSubject([]byte(s)); !errors.Is(err, ErrNotAckSubject) {
			t.Errorf("ParseAckSubject(%q) = %+v, %v; want ErrNotAckSubject", s, r.Meta(), err)
		}
	}
}

// canonicalAck is subj with the leading zeros of its six numbers dropped, which is
// what AppendAckSubject writes for what ParseAckSubject read from subj.
func canonicalAck(subj []byte) []byte {
	toks := bytes.Split(subj[len(AckPrefix):], []byte{'.'})
	for i := 2; i < len(toks); i++ {
		if t := bytes.TrimLeft(toks[i], "0"); len(t) > 0 {
			toks[i] = t
		} else {
			toks[i] = []byte{'0'}
		}
	}
	return append([]byte(AckPrefix), bytes.Join(toks, []byte{'.'})...)
}

func FuzzParseAckSubject(f *testing.F) {
	for _, s := range []string{
		"$TERN.ACK.ORDERS.worker.0.1.2.3.1700000000000000000.0",
		"$TERN.ACK.S.c.1048576.18446744073709551615.18446744073709551615.7.18446744073709551611.99",
		"$TERN.ACK.a.b.007.01.002.0003.00.000",
		"$TERN.ACK.a.b.0.1.2.3.4",
		"$TERN.ACK..b.0.1.2.3.4.5",
		"$TERN.ACK.a.b.1048577.1.2.3.4.5",
		"$TERN.ACK.a.b.0.99999999999999999999.2.3.4.5",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, subj []byte) {
		r, err := ParseAckSubject(subj)
		if err != nil {
			if !errors.Is(err, ErrNotAckSubject) {
				t.Fatalf("ParseAckSubject(%q): unexpected error %v", subj, err)
			}
			return
		}
		if len(r.Stream) == 0 || len(r.Consumer) == 0 || bytes.IndexByte(r.Stream, '.') >= 0 || bytes.IndexByte(r.Consumer, '.') >= 0 ||
			r.Partition < 0 || r.Partition > 1<<20 || !within(r.Stream, subj) || !within(r.Consumer, subj) {
			t.Fatalf("ParseAckSubject(%q) = %+v", subj, r)
		}
		// The format is not canonical (leading zeros), so compare fields, and the bytes
		// only up to leading zeros.
		m := r.Meta()
		enc := AppendAckSubject(nil, &m)
		if want := canonicalAck(subj); !bytes.Equal(enc, want) {
			t.Fatalf("%q re-encodes as %q, want %q", subj, enc, want)
		}
		again, err := ParseAckSubject(enc)
		if err != nil || again.Meta() != m {
			t.Fatalf("re-encoding %+v: %+v, %v", m, again.Meta(), err)
		}
	})
}

func TestParseAckBody(t *testing.T) {
	cases := []struct {
		body   string
		kind   AckKind
		delay  time.Duration
		reason string
	}{
		{"", Ack, 0, ""},
		{"ack", Ack, 0, ""},
		{"nak", Nak, 0, ""},
		{"nak ", Nak, 0, ""}, // an empty delay is no delay
		{"nak 5s", Nak, 5 * time.Second, ""},
		{"nak 250ms", Nak, 250 * time.Millisecond, ""},
		{"nak 1h2m3.5s", Nak, time.Hour + 2*time.Minute + 3500*time.Millisecond, ""},
		{"nak 0s", Nak, 0, ""},
		{"nak -0s", Nak, 0, ""},
		{"wip", InProgress, 0, ""},
		{"term", Term, 0, ""},
		{"term bad input", Term, 0, "bad input"},
		{"term  spaced  out ", Term, 0, " spaced  out "},
	}
	for _, c := range cases {
		b := []byte(c.body)
		kind, delay, reason, err := ParseAckBody(b)
		if err != nil || kind != c.kind || delay != c.delay || string(reason) != c.reason {
			t.Errorf("ParseAckBody(%q) = %v %v %q %v; want %v %v %q", c.body, kind, delay, reason, err, c.kind, c.delay, c.reason)
		}
		if len(reason) > 0 && !within(reason, b) {
			t.Errorf("ParseAckBody(%q) copied the reason", c.body)
		}
	}
	for _, bad := range []string{
		"nak soon", "nak -1s", "nak 5", "nak 1e9h", "nak 9999999999h", "nak 5s ", "nak 5s extra",
		"ok", "ACK", "Nak", "nack 1s", "terminate", "wip\n", "\x00", strings.Repeat("x", 200),
	} {
		kind, delay, reason, err := ParseAckBody([]byte(bad))
		if err == nil {
			t.Errorf("ParseAckBody(%q) = %v %v %q, want an error", bad, kind, delay, reason)
		} else if kind != 0 || delay != 0 || reason != nil {
			t.Errorf("ParseAckBody(%q) failed with a result: %v %v %q", bad, kind, delay, reason)
		} else if len(err.Error()) > 200 {
			t.Errorf("ParseAckBody(%q): error message of %d bytes; the body should be truncated", bad, len(err.Error()))
		}
	}
}

func FuzzParseAckBody(f *testing.F) {
	for _, s := range []string{"", "ack", "nak", "nak 5s", "nak 1h2m3.5s", "wip", "term why", "term", "nak -1s", "nak 1e9h", "nak 9999999999h"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, delay, reason, err := ParseAckBody(b)
		if err != nil {
			if kind != 0 || delay != 0 || reason != nil {
				t.Fatalf("ParseAckBody(%q) failed with a result: %v %v %q", b, kind, delay, reason)
			}
			return
		}
		switch {
		case kind > Term:
			t.Fatalf("ParseAckBody(%q): kind %d", b, kind)
		case delay < 0:
			t.Fatalf("ParseAckBody(%q): negative delay %v", b, delay)
		case delay != 0 && kind != Nak:
			t.Fatalf("ParseAckBody(%q): delay %v on a %v", b, delay, kind)
		case reason != nil && kind != Term:
			t.Fatalf("ParseAckBody(%q): reason %q on a %v", b, reason, kind)
		case len(reason) > 0 && !within(reason, b):
			t.Fatalf("ParseAckBody(%q) copied the reason", b)
		}
		// The delay survives being written back as Go writes durations.
		if kind == Nak && delay > 0 {
			k, d, _, err := ParseAckBody([]byte(NakBody + " " + delay.String()))
			if err != nil || k != Nak || d != delay {
				t.Fatalf("nak %v written back: %v %v %v", delay, k, d, err)
			}
		}
	})
}
