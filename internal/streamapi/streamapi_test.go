package streamapi

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestPubAckRoundTrip(t *testing.T) {
	for _, want := range []PubAck{
		{Stream: "ORDERS", Partition: 0, Seq: 1},
		{Stream: "EVENTS", Partition: 15, Seq: 1<<64 - 1, Duplicate: true},
	} {
		got, err := ParsePubAck(AppendPubAck(nil, want.Stream, want.Partition, want.Seq, want.Duplicate))
		if err != nil || got != want {
			t.Fatalf("round trip of %+v: %+v, %v", want, got, err)
		}
	}
	_, err := ParsePubAck(AppendPubErr(nil, 10077, "stream store full: no space left"))
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 10077 || apiErr.Description != "stream store full: no space left" {
		t.Fatalf("error ack: %v", err)
	}
	for _, bad := range []string{"", "+OK", "+OK s 0", "+OK s x 1", "+OK s 0 1 dupe", "+OK s -1 1", "-ERR x y", "OK s 0 1"} {
		if _, err := ParsePubAck([]byte(bad)); !errors.Is(err, ErrNotPubAck) {
			t.Errorf("ParsePubAck(%q) = %v, want ErrNotPubAck", bad, err)
		}
	}
}

func FuzzParsePubAck(f *testing.F) {
	f.Add([]byte("+OK ORDERS 0 17"))
	f.Add([]byte("+OK ORDERS 2 17 dup"))
	f.Add([]byte("-ERR 10077 no space"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParsePubAck(b)
		if err != nil {
			var apiErr *APIError
			if !errors.Is(err, ErrNotPubAck) && !errors.As(err, &apiErr) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		again, err := ParsePubAck(AppendPubAck(nil, a.Stream, a.Partition, a.Seq, a.Duplicate))
		if err != nil || again != a {
			t.Fatalf("re-encoding %+v: %+v, %v", a, again, err)
		}
	})
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"ORDERS", "a", "with-dash_underscore9"} {
		if err := ValidName("stream", ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "a*", "a>", "a\x00"} {
		if err := ValidName("stream", bad); err == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Duration(90 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var d Duration
	if err := json.Unmarshal(b, &d); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("round trip of %s: %v, %v", b, time.Duration(d), err)
	}
	for in, want := range map[string]time.Duration{`"1h30m"`: 90 * time.Minute, `"250ms"`: 250 * time.Millisecond} {
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Error(`Unmarshal("soon") accepted`)
	}
}
