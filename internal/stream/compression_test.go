package stream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/streamapi"
)

// compressible is a payload with repeats, as S2 blocks would shrink: the
// stream must give back exactly what was published whether it stored a block
// or the records as they came.
func compressible(i int) string {
	return fmt.Sprintf("order %d: %s", i, strings.Repeat("item=widget qty=1 ", i%20))
}

// TestCompressedStreamRoundTrip: a stream that stores its messages S2-compressed
// reads them back unchanged, by sequence and through a consumer, across a
// restart and across changes of its compression.
func TestCompressedStreamRoundTrip(t *testing.T) {
	dir := t.TempDir()
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	info := e.addStream(tern.StreamConfig{Name: "zipped", Subjects: []string{"zipped.>"}, Partitions: 2, Compression: "s2"})
	if info.Config.Compression != "s2" {
		t.Fatalf("config of the new stream: compression %q, want s2", info.Config.Compression)
	}
	const n = 300
	type at struct {
		part int
		seq  uint64
	}
	stored := map[int]at{}
	publish := func(from, to int) {
		for i := from; i <= to; i++ {
			ack := e.publish(fmt.Sprintf("zipped.%d", i%5), compressible(i), tern.Key(fmt.Sprint(i%3)))
			stored[i] = at{ack.Partition, ack.Seq}
		}
	}
	readAll := func(what string, upTo int) {
		t.Helper()
		for i := 1; i <= upTo; i++ {
			msg, err := e.js.GetMsg(e.ctx, "zipped", stored[i].part, stored[i].seq)
			if err != nil || string(msg.Data) != compressible(i) || msg.Subject != fmt.Sprintf("zipped.%d", i%5) {
				t.Fatalf("%s: message %d at %v: %+v, %v", what, i, stored[i], msg, err)
			}
		}
	}
	publish(1, n)
	readAll("compressed", n)

	// Through a consumer: every message once, each partition in order.
	e.addConsumer("zipped", tern.ConsumerConfig{Durable: "all"})
	p := e.js.Pull("zipped", "all")
	seen := map[string]bool{}
	last := map[int]uint64{}
	for _, m := range e.fetch(p, n) {
		md := meta(t, m)
		if md.StreamSeq <= last[md.Partition] {
			t.Fatalf("partition %d: sequence %d after %d", md.Partition, md.StreamSeq, last[md.Partition])
		}
		last[md.Partition] = md.StreamSeq
		seen[string(m.Data)] = true
	}
	p.Close()
	for i := 1; i <= n; i++ {
		if !seen[compressible(i)] {
			t.Fatalf("message %d not delivered", i)
		}
	}

	// Compression may change: what is stored stays readable, what follows is
	// written the new way.
	cfg := info.Config
	cfg.Compression = "none"
	if info, err := e.js.UpdateStream(e.ctx, cfg); err != nil || info.Config.Compression != "none" {
		t.Fatalf("update to no compression: %+v, %v", info, err)
	}
	publish(n+1, n+50)
	cfg.Compression = "s2"
	if info, err := e.js.UpdateStream(e.ctx, cfg); err != nil || info.Config.Compression != "s2" {
		t.Fatalf("update back to s2: %+v, %v", info, err)
	}
	publish(n+51, n+100)
	readAll("after updates", n+100)

	e.nc.Close()
	stop(t, srv)
	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	if got := e.streamInfo("zipped"); got.Config.Compression != "s2" || got.State.Msgs != n+100 {
		t.Fatalf("stream after restart: compression %q, %d messages", got.Config.Compression, got.State.Msgs)
	}
	readAll("after restart", n+100)
	publish(n+101, n+120)
	readAll("written after restart", n+120)
}

// TestCompressionConfig: only none and s2 are taken, at creation and on an
// update; compression may change on an update while sync and partitions still
// may not.
func TestCompressionConfig(t *testing.T) {
	e := newEnv(t)
	badRequest := func(what string, err error) {
		t.Helper()
		var ae *tern.APIError
		if !errors.As(err, &ae) || ae.Code != streamapi.CodeBadRequest {
			t.Fatalf("%s: %v, want a bad request", what, err)
		}
	}
	_, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "lz", Compression: "lz4"})
	badRequest("create with compression lz4", err)
	if err == nil || !strings.Contains(err.Error(), `"lz4"`) {
		t.Fatalf("the refusal does not name the value: %v", err)
	}
	if _, err := e.js.StreamInfo(e.ctx, "lz"); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("a refused stream exists: %v", err)
	}

	info := e.addStream(tern.StreamConfig{Name: "plain", Compression: "none"})
	if info.Config.Compression != "none" {
		t.Fatalf("compression %q, want none", info.Config.Compression)
	}
	if info := e.addStream(tern.StreamConfig{Name: "dflt"}); info.Config.Compression != "" {
		t.Fatalf("default compression %q, want empty (none)", info.Config.Compression)
	}
	e.publish("plain", "before")

	cfg := info.Config
	cfg.Compression = "s2"
	updated, err := e.js.UpdateStream(e.ctx, cfg)
	if err != nil || updated.Config.Compression != "s2" {
		t.Fatalf("update to s2: %+v, %v", updated, err)
	}
	if got := e.streamInfo("plain").Config.Compression; got != "s2" {
		t.Fatalf("stream info after the update: compression %q", got)
	}
	e.publish("plain", "after")

	bad := cfg
	bad.Compression = "zstd"
	_, err = e.js.UpdateStream(e.ctx, bad)
	badRequest("update to compression zstd", err)
	bad = cfg
	bad.Sync = "always"
	_, err = e.js.UpdateStream(e.ctx, bad)
	badRequest("update of sync", err)
	bad = cfg
	bad.Retention = "workqueue"
	_, err = e.js.UpdateStream(e.ctx, bad)
	badRequest("update of retention", err)
	if got := e.streamInfo("plain"); got.Config.Compression != "s2" || got.Config.Sync != "" || got.Config.Partitions != 1 {
		t.Fatalf("config after refused updates: %+v", got.Config)
	}
	for seq, want := range map[uint64]string{1: "before", 2: "after"} {
		msg, err := e.js.GetMsg(e.ctx, "plain", 0, seq)
		if err != nil || string(msg.Data) != want {
			t.Fatalf("message %d: %+v, %v", seq, msg, err)
		}
	}
}
