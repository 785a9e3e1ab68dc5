package streams

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/stream"
	"github.com/tern-mq/tern/internal/streamapi"
)

// TestRequestRouting: which API requests the catalogue answers (on the node that
// got them) and which stream the others are about (answered by its leader).
func TestRequestRouting(t *testing.T) {
	for _, c := range []struct {
		op        string
		catalogue bool
		stream    string
	}{
		{"STREAM.LIST", true, ""},
		{"STREAM.CREATE.ORDERS", true, "ORDERS"},
		{"STREAM.UPDATE.ORDERS", true, "ORDERS"},
		{"STREAM.DELETE.ORDERS", true, "ORDERS"},
		{"STREAM.INFO.ORDERS", false, "ORDERS"},
		{"STREAM.PURGE.ORDERS", false, "ORDERS"},
		{"STREAM.MSG.GET.ORDERS", false, "ORDERS"},
		{"CONSUMER.CREATE.ORDERS", false, "ORDERS"},
		{"CONSUMER.CREATE.ORDERS.W", false, "ORDERS"},
		{"CONSUMER.NEXT.ORDERS.W", false, "ORDERS"},
		{"CONSUMER.LIST.ORDERS", false, "ORDERS"},
		{"STREAM.NAMES", false, ""},
		{"CONSUMER", false, ""},
	} {
		if got := catalogueOp([]byte(c.op)); got != c.catalogue {
			t.Errorf("%s: catalogue %v, want %v", c.op, got, c.catalogue)
		}
		if got := string(streamOf([]byte(c.op))); got != c.stream {
			t.Errorf("%s: stream %q, want %q", c.op, got, c.stream)
		}
	}
}

// TestServeSubjects: the leader's subscriptions cover every per-stream request
// and ack, and nothing of another stream.
func TestServeSubjects(t *testing.T) {
	api, acks := serveSubjects("ORDERS")
	want := map[string]bool{
		"$TERN.API.STREAM.INFO.ORDERS": true, "$TERN.API.STREAM.PURGE.ORDERS": true,
		"$TERN.API.STREAM.MSG.GET.ORDERS": true, "$TERN.API.CONSUMER.*.ORDERS": true,
		"$TERN.API.CONSUMER.*.ORDERS.*": true, "$TERN.ACK.ORDERS.>": true,
	}
	for _, s := range append(api, acks...) {
		if !want[s] {
			t.Errorf("unexpected subject %s", s)
		}
		delete(want, s)
	}
	for s := range want {
		t.Errorf("missing subject %s", s)
	}
}

// TestServeSubjectsOfAccount: an account's stream is served on the account's
// subjects only.
func TestServeSubjectsOfAccount(t *testing.T) {
	api, acks := serveSubjects("$A.acme.ORDERS")
	want := map[string]bool{
		"$A.acme.$TERN.API.STREAM.INFO.ORDERS": true, "$A.acme.$TERN.API.STREAM.PURGE.ORDERS": true,
		"$A.acme.$TERN.API.STREAM.MSG.GET.ORDERS": true, "$A.acme.$TERN.API.CONSUMER.*.ORDERS": true,
		"$A.acme.$TERN.API.CONSUMER.*.ORDERS.*": true, "$A.acme.$TERN.ACK.ORDERS.>": true,
	}
	for _, s := range append(api, acks...) {
		if !want[s] {
			t.Errorf("unexpected subject %s", s)
		}
		delete(want, s)
	}
	for s := range want {
		t.Errorf("missing subject %s", s)
	}
	if got := infoSubject("$A.acme.ORDERS"); got != "$A.acme.$TERN.API.STREAM.INFO.ORDERS" {
		t.Errorf("info subject %s", got)
	}
	if got := infoSubject("ORDERS"); got != "$TERN.API.STREAM.INFO.ORDERS" {
		t.Errorf("info subject %s", got)
	}
}

// FuzzDecodeConfig: a stream's configuration in a create or update comes from a
// client, forwarded by another node. Decoding it gives an error or a configuration
// of the stream the subject names, never a panic; once normalised, as the
// catalogue does before committing it, it survives its own encoding, and
// normalising again changes nothing.
func FuzzDecodeConfig(f *testing.F) {
	full, _ := json.Marshal(streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>", "o.*"},
		Retention: streamapi.RetainWorkQueue, MaxAge: streamapi.Duration(time.Hour), MaxBytes: 1 << 30, MaxMsgs: 9,
		MaxMsgSize: 4096, Discard: "new", Partitions: 4, DuplicateWindow: streamapi.Duration(time.Minute),
		Sync: "always", SegmentBytes: 1 << 20, SegmentAge: streamapi.Duration(time.Hour), Compression: "s2",
		Replicas: 3})
	compact, _ := json.Marshal(streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"k"},
		Compact: &streamapi.Compaction{MinLag: streamapi.Duration(time.Second), MaxLag: streamapi.Duration(time.Minute)}})
	for _, body := range [][]byte{full, compact,
		[]byte(`{"name":"ORDERS","subjects":["t.>"]}`),
		[]byte(`{"subjects":["l"],"max_msgs":1,"discard":"new","sync":"always","segment_bytes":4096}`),
		[]byte(`{"name":"ORDERS","subjects":["p.*"],"partitions":3,"retention":"workqueue","max_age":"1h"}`),
		[]byte(""), []byte(" "), []byte("{"), []byte("null"), []byte(`{"name":"OTHER"}`),
		[]byte(`{"no_such_field":1}`), []byte(`{"max_age":"-1h","replicas":2}`), []byte(`{"subjects":"x"}`),
	} {
		f.Add("ORDERS", body)
	}
	m, err := stream.New(stream.Config{Dir: f.TempDir(), MaxPayload: 1 << 20}, broker.New(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(m.Close)
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		cfg, err := decodeConfig(name, body)
		if err != nil {
			return
		}
		if cfg.Name != name {
			t.Fatalf("decoded stream %q for the subject's %q", cfg.Name, name)
		}
		if err := m.Normalise(&cfg); err != nil {
			return
		}
		// What is committed to the catalogue is the normalised configuration in
		// JSON, which every node decodes again.
		raw, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("encoding a normalised configuration: %v", err)
		}
		again, err := decodeConfig(name, raw)
		if err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip of %s: %+v, %v; want %+v", raw, again, err, cfg)
		}
		if err := m.Normalise(&again); err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("normalising twice: %+v, %v; want %+v", again, err, cfg)
		}
	})
}
