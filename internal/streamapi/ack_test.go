package streamapi

import (
	"errors"
	"testing"
	"time"
)

func TestAckSubjectRoundTrip(t *testing.T) {
	for _, m := range []AckMeta{
		{Stream: "ORDERS", Consumer: "worker", Partition: 0, Deliveries: 1, StreamSeq: 1, ConsumerSeq: 1, Time: 1700000000123456789, Pending: 0},
		{Stream: "S", Consumer: "c-1_x", Partition: 1 << 20, Deliveries: 1<<64 - 1, StreamSeq: 1<<64 - 1, ConsumerSeq: 7, Time: -5, Pending: 99},
	} {
		subj := AppendAckSubject(nil, &m)
		r, err := ParseAckSubject(subj)
		if err != nil {
			t.Fatalf("ParseAckSubject(%q): %v", subj, err)
		}
		if got := r.Meta(); got != m {
			t.Fatalf("round trip of %q: got %+v, want %+v", subj, got, m)
		}
	}
}

func TestParseAckSubjectRejects(t *testing.T) {
	for _, s := range []string{
		"", "$TERN.ACK", "$TERN.ACK.", "$TERN.ACKS.a.b.0.1.2.3.4.5",
		"$TERN.ACK.a.b.0.1.2.3.4",                      // one number short
		"$TERN.ACK.a.b.0.1.2.3.4.5.6",                  // one too many
		"$TERN.ACK..b.0.1.2.3.4.5",                     // empty stream
		"$TERN.ACK.a..0.1.2.3.4.5",                     // empty consumer
		"$TERN.ACK.a.b.x.1.2.3.4.5",                    // partition not a number
		"$TERN.ACK.a.b.0.1.2.3.4.-5",                   // sign
		"$TERN.ACK.a.b.2000000.1.2.3.4.5",              // partition beyond 2^20
		"$TERN.ACK.a.b.0.18446744073709551616.2.3.4.5", // 2^64
		"OTHER.ACK.a.b.0.1.2.3.4.5",
	} {
		if _, err := ParseAckSubject([]byte(s)); !errors.Is(err, ErrNotAckSubject) {
			t.Errorf("ParseAckSubject(%q) = %v, want ErrNotAckSubject", s, err)
		}
	}
}

func TestParseAckBody(t *testing.T) {
	cases := []struct {
		body   string
		kind   AckKind
		delay  time.Duration
		reason string
	}{
		{"", Ack, 0, ""}, {"ack", Ack, 0, ""}, {"nak", Nak, 0, ""}, {"nak 5s", Nak, 5 * time.Second, ""},
		{"nak 250ms", Nak, 250 * time.Millisecond, ""}, {"wip", InProgress, 0, ""}, {"term", Term, 0, ""},
		{"term bad input", Term, 0, "bad input"},
	}
	for _, c := range cases {
		kind, delay, reason, err := ParseAckBody([]byte(c.body))
		if err != nil || kind != c.kind || delay != c.delay || string(reason) != c.reason {
			t.Errorf("ParseAckBody(%q) = %v %v %q %v", c.body, kind, delay, reason, err)
		}
	}
	for _, bad := range []string{"nak soon", "nak -1s", "ok", "ACK", "nack 1s"} {
		if _, _, _, err := ParseAckBody([]byte(bad)); err == nil {
			t.Errorf("ParseAckBody(%q) accepted", bad)
		}
	}
}

func FuzzParseAckSubject(f *testing.F) {
	f.Add([]byte("$TERN.ACK.ORDERS.worker.0.1.2.3.1700000000000000000.0"))
	f.Add([]byte("$TERN.ACK.a.b.0.1.2.3.4"))
	f.Add([]byte("$TERN.ACK..b.0.1.2.3.4.5"))
	f.Fuzz(func(t *testing.T, subj []byte) {
		r, err := ParseAckSubject(subj)
		if err != nil {
			if !errors.Is(err, ErrNotAckSubject) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		m := r.Meta()
		again, err := ParseAckSubject(AppendAckSubject(nil, &m))
		if err != nil || again.Meta() != m {
			t.Fatalf("re-encoding %+v: %+v, %v", m, again.Meta(), err)
		}
	})
}

func FuzzParseAckBody(f *testing.F) {
	for _, s := range []string{"", "ack", "nak", "nak 5s", "wip", "term why", "nak -1s", "nak 1e9h"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, delay, reason, err := ParseAckBody(b)
		if err != nil {
			return
		}
		if delay < 0 || kind > Term || (kind != Term && reason != nil) {
			t.Fatalf("ParseAckBody(%q) = %v %v %q", b, kind, delay, reason)
		}
	})
}
