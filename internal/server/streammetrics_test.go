package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// TestStreamMetrics: /metrics has each stream's messages, bytes, file bytes
// and last sequence, and a compacted stream's distinct keys.
func TestStreamMetrics(t *testing.T) {
	s := startServer(t, nil)
	nc, err := tern.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := nc.Streams()
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "KV", Subjects: []string{"kv.>"}, Compact: &tern.Compaction{}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "a"} {
		if _, err := js.Publish(ctx, "kv.x", []byte("value"), tern.Key(k)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := js.StreamInfo(ctx, "KV")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FileBytes == 0 || info.State.Keys != 2 {
		t.Fatalf("state %+v: want file bytes and 2 keys", info.State)
	}
	body := scrapeMetrics(t, s)
	for _, want := range []string{
		`tern_stream_messages{stream="KV"} 3`,
		`tern_stream_last_seq{stream="KV"} 3`,
		`tern_stream_keys{stream="KV"} 2`,
		`tern_stream_file_bytes{stream="KV"} ` + strconv.FormatUint(info.State.FileBytes, 10),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
}

// scrapeMetrics is s's /metrics page.
func scrapeMetrics(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
