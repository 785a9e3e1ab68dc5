package streamapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"
)

func TestPubAckRoundTrip(t *testing.T) {
	for _, want := range []PubAck{
		{Stream: "ORDERS", Partition: 0, Seq: 1},
		{Stream: "EVENTS", Partition: 15, Seq: 1<<64 - 1, Duplicate: true},
		{Stream: "a", Partition: 1023, Seq: 0},
		{Stream: strings.Repeat("x", 64), Partition: 1 << 40, Seq: 7, Duplicate: true},
	} {
		b := AppendPubAck([]byte("junk"), want.Stream, want.Partition, want.Seq, want.Duplicate)[len("junk"):]
		got, err := ParsePubAck(b)
		if err != nil || got != want {
			t.Fatalf("round trip of %+v through %q: %+v, %v", want, b, got, err)
		}
	}
	if b := AppendPubAck(nil, "S", 2, 9, true); string(b) != "+OK S 2 9 dup" {
		t.Fatalf("AppendPubAck wrote %q", b)
	}

	for _, want := range []APIError{
		{Code: 10077, Description: "stream store full: no space left"},
		{Code: CodeTooLarge, Description: ""},
		{Code: CodeLimits, Description: "  spaces\tand tabs  "},
		{Code: -1, Description: "x"},
	} {
		b := AppendPubErr(nil, want.Code, want.Description)
		a, err := ParsePubAck(b)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || *apiErr != want || a != (PubAck{}) {
			t.Fatalf("error ack %q: %+v, %v; want %+v", b, a, err, want)
		}
		if errors.Is(err, ErrNotPubAck) {
			t.Fatalf("error ack %q reported as not an ack", b)
		}
	}
	// Without a description the code alone is enough.
	if _, err := ParsePubAck([]byte("-ERR 503")); err == nil || err.(*APIError).Code != 503 {
		t.Fatalf(`"-ERR 503": %v`, err)
	}
}

// The form is read leniently (any run of white space separates fields, signs are
// accepted), so parsed acks are compared by field, not by their bytes.
func TestParsePubAckLenient(t *testing.T) {
	got, err := ParsePubAck([]byte("+OK  S\t+2   009 dup\n"))
	if want := (PubAck{Stream: "S", Partition: 2, Seq: 9, Duplicate: true}); err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

func TestParsePubAckRejects(t *testing.T) {
	for _, bad := range []string{
		"", "+OK", "+OK ", "+OK s", "+OK s 0", "+OK s x 1", "+OK s 0 x", "+OK s 0 1 dupe", "+OK s 0 1 DUP",
		"+OK s 0 1 dup dup", "+OK s -1 1", "+OK s 0 -1", "+OK s 0 18446744073709551616", "+OK s 99999999999999999999 1",
		"+OK s 0 1.5", "+ok s 0 1", "OK s 0 1", "+OKs 0 1",
		"-ERR", "-ERR ", "-ERR x y", "-ERR 12x y", "-ERR  500 double space", "-ERR 99999999999999999999 y", "-err 500 x",
		strings.Repeat("+", 1000),
	} {
		a, err := ParsePubAck([]byte(bad))
		if !errors.Is(err, ErrNotPubAck) || a != (PubAck{}) {
			t.Errorf("ParsePubAck(%q) = %+v, %v; want ErrNotPubAck", bad, a, err)
		}
	}
}

func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{
		"+OK ORDERS 0 17", "+OK ORDERS 2 17 dup", "+OK  S\t+2   009 dup\n", "+OK s 0 18446744073709551615",
		"-ERR 10077 no space", "-ERR 503", "-ERR +5 x", "-ERR x y", "+OK s -1 1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParsePubAck(b)
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr):
			// An error ack survives being written back.
			_, err := ParsePubAck(AppendPubErr(nil, apiErr.Code, apiErr.Description))
			var again *APIError
			if !errors.As(err, &again) || *again != *apiErr {
				t.Fatalf("%q: error %+v written back parses as %v", b, apiErr, err)
			}
			return
		case err != nil:
			if !errors.Is(err, ErrNotPubAck) {
				t.Fatalf("%q: unexpected error type %T: %v", b, err, err)
			}
			if a != (PubAck{}) {
				t.Fatalf("%q failed with a result %+v", b, a)
			}
			return
		}
		if a.Stream == "" || strings.IndexFunc(a.Stream, unicode.IsSpace) >= 0 || a.Partition < 0 {
			t.Fatalf("%q parsed as %+v", b, a)
		}
		again, err := ParsePubAck(AppendPubAck(nil, a.Stream, a.Partition, a.Seq, a.Duplicate))
		if err != nil || again != a {
			t.Fatalf("re-encoding %+v: %+v, %v", a, again, err)
		}
	})
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"ORDERS", "a", "Z", "0", "-", "_", "with-dash_underscore9", strings.Repeat("n", 64)} {
		if err := ValidName("stream", ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	// Whatever is refused would not be one subject token, or is outside the set.
	for _, bad := range []string{
		"", strings.Repeat("n", 65), "a.b", ".", "a b", " a", "a\t", "a*", "*", "a>", ">", "a\x00", "é", "a$b", "a/b", "a+b",
	} {
		err := ValidName("consumer", bad)
		if err == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		} else if !strings.HasPrefix(err.Error(), "consumer name ") {
			t.Errorf("ValidName(%q) = %q; the message should say which kind of name", bad, err)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 90 * time.Second, -time.Minute, 1500 * time.Millisecond, 1<<63 - 1, -1 << 63} {
		b, err := json.Marshal(Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		if want := `"` + d.String() + `"`; string(b) != want {
			t.Errorf("Marshal(%v) = %s, want %s", d, b, want)
		}
		var got Duration
		if err := json.Unmarshal(b, &got); err != nil || time.Duration(got) != d {
			t.Errorf("round trip of %v through %s: %v, %v", d, b, time.Duration(got), err)
		}
	}
	for in, want := range map[string]time.Duration{
		`"1h30m"`: 90 * time.Minute, `"250ms"`: 250 * time.Millisecond, `"-1.5s"`: -1500 * time.Millisecond,
		`""`: 0, `"0"`: 0, `1500000000`: 1500 * time.Millisecond, `-7`: -7, `"\u0031s"`: time.Second,
	} {
		d := Duration(time.Hour) // must be overwritten
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	// null leaves the value alone, as json does for other types.
	d := Duration(time.Hour)
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || time.Duration(d) != time.Hour {
		t.Errorf("Unmarshal(null) = %v, %v; want the value unchanged", time.Duration(d), err)
	}
	for _, bad := range []string{`"soon"`, `"5"`, `"1e3s"`, `1.5`, `1e9`, `true`, `[]`, `{}`, `"9999999999h"`, `9223372036854775808`} {
		d := Duration(time.Hour)
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("Unmarshal(%s) accepted as %v", bad, time.Duration(d))
		}
	}

	// Inside a request body, as the API reads it.
	var cfg ConsumerConfig
	body := `{"ack_wait":"45s","backoff":["1s",2000000000,""],"inactive_threshold":null}`
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatal(err)
	}
	if time.Duration(cfg.AckWait) != 45*time.Second || len(cfg.Backoff) != 3 || time.Duration(cfg.Backoff[0]) != time.Second ||
		time.Duration(cfg.Backoff[1]) != 2*time.Second || cfg.Backoff[2] != 0 || cfg.InactiveThreshold != 0 {
		t.Fatalf("%s decoded as %+v", body, cfg)
	}
	if err := json.Unmarshal([]byte(`{"ack_wait":"forever"}`), &cfg); err == nil {
		t.Fatal(`ack_wait "forever" accepted`)
	}
}

// FuzzDurationJSON: Duration reads JSON from clients' request bodies. Any input
// either fails or gives a value that survives Marshal and Unmarshal.
func FuzzDurationJSON(f *testing.F) {
	for _, s := range []string{`"1h30m"`, `"250ms"`, `""`, `null`, `1500000000`, `-7`, `"soon"`, `1.5`, `"\u0031s"`,
		`"-2562047h47m16.854775808s"`, `9223372036854775807`, `"9999999999h"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := Duration(time.Hour)
		if err := d.UnmarshalJSON(b); err != nil {
			if d != Duration(time.Hour) {
				t.Fatalf("%q failed (%v) but changed the value to %v", b, err, time.Duration(d))
			}
			return
		}
		out, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("%q decoded to %v, which does not encode: %v", b, time.Duration(d), err)
		}
		var again Duration
		if err := json.Unmarshal(out, &again); err != nil || again != d {
			t.Fatalf("%q decoded to %v, written as %s, read back as %v, %v", b, time.Duration(d), out, time.Duration(again), err)
		}
	})
}

func TestScanPubAck(t *testing.T) {
	if p, seq, dup, err := ScanPubAck(AppendPubAck(nil, "ORDERS", 2, 41, false)); err != nil || p != 2 || seq != 41 || dup {
		t.Fatalf("ScanPubAck of an ack: %d %d %v %v", p, seq, dup, err)
	}
	if _, seq, dup, err := ScanPubAck([]byte("+OK S 0 5 dup")); err != nil || seq != 5 || !dup {
		t.Fatalf("a duplicate ack: %d %v %v", seq, dup, err)
	}
	var ae *APIError
	if _, _, _, err := ScanPubAck(AppendPubErr(nil, CodeLimits, "full")); !errors.As(err, &ae) || ae.Code != CodeLimits || ae.Description != "full" {
		t.Fatalf("ScanPubAck of an error: %v", err)
	}
	for _, bad := range []string{"+OK S 0 1 *2", "+OK S 0 1 dupe", "+OK S 0", "+OK S x 1", "OK S 0 1"} {
		if _, _, _, err := ScanPubAck([]byte(bad)); !errors.Is(err, ErrNotPubAck) {
			t.Errorf("ScanPubAck(%q): %v, want ErrNotPubAck", bad, err)
		}
	}
}
