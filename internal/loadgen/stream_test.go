package loadgen_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

func TestStreamWorkloads(t *testing.T) {
	s := servertest.Start(t, nil)
	url := s.URL()
	for _, c := range []struct {
		name string
		cfg  loadgen.StreamConfig
		want uint64
	}{
		{"streampub-1", loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Size: 64, Msgs: 2000}, Window: 100}, 2000},
		{"streampub-2x3partitions", loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Pubs: 2, Size: 16, Msgs: 500}, Partitions: 3}, 1000},
		{"streampub-small", loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Size: 0, Msgs: 100}, Window: 1}, 100},
		{"streamconsume", loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamConsume, Size: 128, Msgs: 2000}, Batch: 64}, 2000},
		{"streamconsume-partitions", loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamConsume, Size: 8, Msgs: 300}, Partitions: 4, Batch: 1000}, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.URL = url
			c.cfg.Timeout = time.Minute
			res, err := loadgen.RunStream(context.Background(), c.cfg)
			if err != nil {
				t.Fatalf("run: %v\n%s", err, res)
			}
			if res.Sent != c.want || res.Received != c.want || res.Expected != c.want || res.Errors != 0 {
				t.Fatalf("sent %d received %d expected %d errors %d, want %d:\n%s", res.Sent, res.Received, res.Expected, res.Errors, c.want, res)
			}
			if res.Elapsed <= 0 || res.MsgsPerSec <= 0 || res.Latency.Samples == 0 || res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P50 {
				t.Fatalf("rates or latency missing: %+v", res)
			}
			if c.cfg.Mode == loadgen.ModeStreamPub && res.Latency.Samples != int64(c.want) {
				t.Fatalf("%d ack latency samples, want %d", res.Latency.Samples, c.want)
			}
			if !strings.HasPrefix(res.Stream, "BENCH_") || strings.Contains(res.String(), "missing") {
				t.Fatalf("summary:\n%s", res)
			}
		})
	}
	// Every stream was deleted.
	nc, err := tern.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if list, err := nc.Streams().ListStreams(t.Context()); err != nil || len(list) != 0 {
		t.Fatalf("streams left behind: %v %+v", err, list)
	}
}

func TestStreamWorkloadKeepAndReuse(t *testing.T) {
	s := servertest.Start(t, nil)
	cfg := loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Size: 32, Msgs: 50, Subject: "keep.me"},
		URL: s.URL(), Stream: "KEPT", Keep: true}
	if _, err := loadgen.RunStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	// A consume run on the same stream sees only its own messages.
	cfg.Mode = loadgen.ModeStreamConsume
	cfg.Msgs = 30
	res, err := loadgen.RunStream(context.Background(), cfg)
	if err != nil || res.Received != 30 {
		t.Fatalf("reuse: %v\n%s", err, res)
	}
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := nc.Streams()
	info, err := js.StreamInfo(t.Context(), "KEPT")
	if err != nil || info.State.Msgs != 80 || info.Config.Subjects[0] != "keep.me" {
		t.Fatalf("kept stream: %v %+v", err, info)
	}
	if cs, err := js.ListConsumers(t.Context(), "KEPT"); err != nil || len(cs) != 0 {
		t.Fatalf("the bench consumer was left behind: %v %+v", err, cs)
	}
}

func TestStreamWorkloadErrors(t *testing.T) {
	for _, cfg := range []loadgen.StreamConfig{
		{Config: loadgen.Config{Mode: loadgen.ModePubSub, Msgs: 1}, URL: "tern://127.0.0.1:1"},
		{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Msgs: 1}},
		{Config: loadgen.Config{Mode: loadgen.ModeStreamPub}, URL: "tern://127.0.0.1:1"},
		{Config: loadgen.Config{Mode: loadgen.ModeStreamConsume, Duration: time.Second}, URL: "tern://127.0.0.1:1"},
		{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Msgs: 1}, URL: "tern://127.0.0.1:1", Window: -1},
		{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Msgs: 1}, URL: "tern://127.0.0.1:1"}, // no server
	} {
		if res, err := loadgen.RunStream(context.Background(), cfg); err == nil || res.Sent != 0 {
			t.Errorf("%+v: err %v, sent %d", cfg, err, res.Sent)
		}
	}
	s := servertest.Start(t, func(c *server.Config) { c.StoreDir = "" })
	_, err := loadgen.RunStream(context.Background(), loadgen.StreamConfig{Config: loadgen.Config{Mode: loadgen.ModeStreamPub, Msgs: 1}, URL: s.URL()})
	if err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("server without streams: %v", err)
	}
}

func TestStreamResultJSON(t *testing.T) {
	r := loadgen.StreamResult{Result: loadgen.Result{Mode: loadgen.ModeStreamConsume, Sent: 10, Received: 10, Expected: 10,
		Elapsed: time.Second, MsgsPerSec: 10, Latency: loadgen.Percentiles{Samples: 1, P50: time.Millisecond}},
		Stream: "S", Partitions: 2, Batch: 5}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back loadgen.StreamResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Stream != "S" || back.Partitions != 2 || back.Batch != 5 || back.Received != 10 || back.Elapsed != time.Second || back.Latency.P50 != time.Millisecond {
		t.Fatalf("round trip: %+v\n%s", back, b)
	}
	// It reads as a plain Result too, and has Result's fields.
	var plain loadgen.Result
	if err := json.Unmarshal(b, &plain); err != nil || plain.Sent != 10 || plain.Mode != loadgen.ModeStreamConsume {
		t.Fatalf("as Result: %v %+v", err, plain)
	}
	for _, k := range []string{`"msgs_per_sec"`, `"latency"`, `"p50_us"`, `"stream":"S"`, `"batch":5`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	if strings.Contains(string(b), `"window"`) {
		t.Errorf("streamconsume JSON has a window: %s", b)
	}
}
