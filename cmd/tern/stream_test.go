package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// runCLI runs a command group's subcommand against url and returns its output.
func runCLI(t *testing.T, fn func(context.Context, []string, *bytes.Buffer) error, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := fn(ctx, args, &out)
	return out.String(), err
}

func streamCLI(ctx context.Context, args []string, out *bytes.Buffer) error {
	return streamCmd(ctx, args, out)
}
func consumerCLI(ctx context.Context, args []string, out *bytes.Buffer) error {
	return consumerCmd(ctx, args, out)
}
func pubCLI(ctx context.Context, args []string, out *bytes.Buffer) error {
	return publish(ctx, args, out)
}

// mustRun runs a command that must succeed.
func mustRun(t *testing.T, fn func(context.Context, []string, *bytes.Buffer) error, args ...string) string {
	t.Helper()
	out, err := runCLI(t, fn, args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

// wantLine fails unless out has a line matching the regular expression re.
func wantLine(t *testing.T, out, re string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
		t.Errorf("output lacks a line matching %q:\n%s", re, out)
	}
}

func TestStreamCommands(t *testing.T) {
	s := startCLIServer(t)
	url := s.URL()
	srv := []string{"--server", url}
	with := func(args ...string) []string { return append(args, srv...) }
	pre := func(args ...string) []string { return append(append([]string(nil), srv...), args...) } // pub takes options first

	out := mustRun(t, streamCLI, "ls", "--server", url)
	if out != "No streams\n" {
		t.Fatalf("ls of nothing: %q", out)
	}

	// Flags after the name work too.
	out = mustRun(t, streamCLI, with("add", "ORDERS", "--subjects", "orders.>,refunds.*", "--max-age", "1h",
		"--max-bytes", "1MiB", "--max-msgs", "1000", "--discard", "old", "--dupe-window", "1m")...)
	for _, re := range []string{`^Stream ORDERS created$`, `subjects:\s+orders\.>, refunds\.\*$`, `max age:\s+1h0m0s$`,
		`max bytes:\s+1\.0 MiB$`, `max msgs:\s+1000$`, `duplicate window:\s+1m0s$`, `retention:\s+limits$`, `compression:\s+none$`, `messages:\s+0$`} {
		wantLine(t, out, re)
	}

	out = mustRun(t, streamCLI, with("add", "ORDERS", "--subjects", "orders.>,refunds.*", "--max-age", "1h",
		"--max-bytes", "1MiB", "--max-msgs", "1000", "--dupe-window", "1m")...)
	wantLine(t, out, `^Stream ORDERS already exists with this configuration$`)
	if _, err := runCLI(t, streamCLI, with("add", "ORDERS", "--subjects", "orders.>")...); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("add with another configuration: %v", err)
	}

	out = mustRun(t, pubCLI, pre("--ack", "--header", "sender=s1", "--msg-id", "m1", "orders.new", "hello")...)
	if out != "stream ORDERS partition 0 seq 1\n" {
		t.Fatalf("pub --ack: %q", out)
	}
	out = mustRun(t, pubCLI, pre("--ack", "--msg-id", "m1", "orders.new", "hello again")...)
	if out != "stream ORDERS partition 0 seq 1 (duplicate)\n" {
		t.Fatalf("pub --ack of a duplicate: %q", out)
	}
	out = mustRun(t, pubCLI, pre("--ack", "--count", "2", "refunds.x", "r{{i}}")...)
	if out != "stream ORDERS partition 0 seq 2\nstream ORDERS partition 0 seq 3\n" {
		t.Fatalf("pub --ack --count 2: %q", out)
	}
	if _, err := runCLI(t, pubCLI, pre("--ack", "nostream.here", "x")...); err == nil || !strings.Contains(err.Error(), "no stream captures") {
		t.Fatalf("pub --ack to an uncaptured subject: %v", err)
	}

	out = mustRun(t, streamCLI, with("ls")...)
	wantLine(t, out, `^NAME\s+SUBJECTS\s+RETENTION\s+MESSAGES\s+BYTES\s+FIRST SEQ\s+LAST SEQ\s+CONSUMERS$`)
	wantLine(t, out, `^ORDERS\s+orders\.>,refunds\.\*\s+limits\s+3\s+\d+ B\s+1\s+3\s+0$`)

	out = mustRun(t, streamCLI, with("info", "ORDERS")...)
	wantLine(t, out, `^\s+messages:\s+3$`)
	wantLine(t, out, `^\s+first seq:\s+1 \(\d{4}-`)
	wantLine(t, out, `^\s+last seq:\s+3 \(`)
	out = mustRun(t, streamCLI, with("info", "--json", "ORDERS")...)
	var info tern.StreamInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("info --json: %v\n%s", err, out)
	}
	if info.Config.Name != "ORDERS" || info.State.Msgs != 3 || time.Duration(info.Config.MaxAge) != time.Hour || info.Config.MaxBytes != 1<<20 {
		t.Fatalf("info --json: %+v", info)
	}

	out = mustRun(t, streamCLI, with("get", "ORDERS", "--seq", "1")...)
	wantLine(t, out, `^\[ORDERS partition 0 seq 1\] orders\.new \(5 B\) stored \d{4}-`)
	wantLine(t, out, `^  sender: s1$`)
	wantLine(t, out, `^  Tern-Msg-Id: m1$`)
	wantLine(t, out, `^hello$`)
	out = mustRun(t, streamCLI, with("get", "ORDERS", "--last-subject", "refunds.x", "--json")...)
	var got jsonStoredMsg
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Seq != 3 || got.Data != "r1" || got.Subject != "refunds.x" {
		t.Fatalf("get --last-subject --json: %v %+v\n%s", err, got, out)
	}
	if out := mustRun(t, streamCLI, with("get", "ORDERS", "--seq", "2", "--raw")...); out != "r0\n" {
		t.Fatalf("get --raw: %q", out)
	}
	if _, err := runCLI(t, streamCLI, with("get", "ORDERS", "--seq", "99")...); err == nil {
		t.Fatal("get of a missing sequence succeeded")
	}
	if _, err := runCLI(t, streamCLI, with("get", "ORDERS")...); err == nil {
		t.Fatal("get without --seq or --last-subject succeeded")
	}

	out = mustRun(t, streamCLI, with("purge", "ORDERS", "--subject", "refunds.x", "--keep", "1")...)
	if out != "Purged 1 message from stream ORDERS\n" {
		t.Fatalf("purge --subject --keep: %q", out)
	}
	if _, err := runCLI(t, streamCLI, with("purge", "ORDERS", "--partition", "1")...); err == nil {
		t.Fatal("purge of partition 1 of a stream of one partition succeeded")
	}
	out = mustRun(t, streamCLI, with("purge", "ORDERS", "--partition", "0", "--seq", "2")...)
	if out != "Purged 1 message from stream ORDERS\n" {
		t.Fatalf("purge --partition 0 --seq 2: %q", out)
	}
	out = mustRun(t, streamCLI, with("purge", "ORDERS")...)
	if out != "Purged 1 message from stream ORDERS\n" {
		t.Fatalf("purge: %q", out)
	}
	wantLine(t, mustRun(t, streamCLI, with("info", "ORDERS")...), `^\s+messages:\s+0$`)

	if _, err := runCLI(t, streamCLI, with("rm", "ORDERS")...); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("rm without --force: %v", err)
	}
	if out := mustRun(t, streamCLI, with("rm", "-f", "ORDERS")...); out != "Stream ORDERS deleted\n" {
		t.Fatalf("rm -f: %q", out)
	}
	if _, err := runCLI(t, streamCLI, with("info", "ORDERS")...); err == nil || !strings.Contains(err.Error(), `stream "ORDERS" not found`) {
		t.Fatalf("info after rm: %v", err)
	}
	if _, err := runCLI(t, streamCLI, with("rm", "--force", "ORDERS")...); err == nil {
		t.Fatal("rm of a missing stream succeeded")
	}
}

func TestStreamAddOptions(t *testing.T) {
	s := startCLIServer(t)
	srv := []string{"--server", s.URL()}
	out := mustRun(t, streamCLI, append([]string{"add", "--json", "--retention", "workqueue", "--partitions", "3",
		"--max-msg-size", "2KiB", "--discard", "new", "--sync", "always", "--segment-size", "1MiB", "--max-bytes", "10MB", "--compression", "s2", "JOBS"}, srv...)...)
	var info tern.StreamInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("add --json: %v\n%s", err, out)
	}
	c := info.Config
	if c.Name != "JOBS" || len(c.Subjects) != 1 || c.Subjects[0] != "JOBS" || c.Retention != tern.RetainWorkQueue ||
		c.Partitions != 3 || c.MaxMsgSize != 2048 || c.Discard != "new" || c.Sync != "always" || c.SegmentBytes != 1<<20 || c.MaxBytes != 10e6 ||
		c.Compression != "s2" {
		t.Fatalf("config %+v", c)
	}
	// Keys spread messages over the partitions; the info shows each.
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if _, err := runCLI(t, pubCLI, append(srv, "--ack", "--key", k, "JOBS", "job "+k)...); err != nil {
			t.Fatal(err)
		}
	}
	out = mustRun(t, streamCLI, append([]string{"info", "JOBS"}, srv...)...)
	wantLine(t, out, `^\s+partitions:\s+3$`)
	wantLine(t, out, `^\s+messages:\s+6$`)
	wantLine(t, out, `^\s+partition 2:\s+\d+ msgs`)
	wantLine(t, out, `^\s+compression:\s+s2$`)

	// Compression can change on an existing stream; the messages stay readable.
	out = mustRun(t, streamCLI, append([]string{"edit", "JOBS", "--compression", "none"}, srv...)...)
	wantLine(t, out, `^Stream JOBS updated$`)
	wantLine(t, out, `^\s+compression:\s+none$`)
	wantLine(t, out, `^\s+messages:\s+6$`)
	if _, err := runCLI(t, pubCLI, append(srv, "--ack", "--key", "g", "JOBS", "job g")...); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, streamCLI, append([]string{"edit", "JOBS", "--compression", "s2", "--json"}, srv...)...)
	info = tern.StreamInfo{}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Config.Compression != "s2" || info.State.Msgs != 7 {
		t.Fatalf("edit --compression s2 --json: %v %+v\n%s", err, info, out)
	}

	// Partitions can be added; the old ones keep their messages.
	out = mustRun(t, streamCLI, append([]string{"edit", "JOBS", "--partitions", "5"}, srv...)...)
	wantLine(t, out, `^\s+partitions:\s+5$`)
	wantLine(t, out, `^\s+messages:\s+7$`)
	wantLine(t, out, `^\s+partition 4:\s+0 msgs`)

	// A compacted stream shows its compaction; the options need --compact.
	out = mustRun(t, streamCLI, append([]string{"add", "PROFILES", "--compact", "--compact-min-lag", "1m"}, srv...)...)
	wantLine(t, out, `^\s+compacted:\s+latest per key, min lag 1m0s, tombstones kept 24h0m0s, head sealed after 168h0m0s$`)
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--tombstone-retention", "1h"}, srv...)...)
	wantLine(t, out, `^\s+compacted:\s+latest per key, min lag 1m0s, tombstones kept 1h0m0s, head sealed after 168h0m0s$`)
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--compact-max-lag", "10m"}, srv...)...)
	wantLine(t, out, `^\s+compacted:\s+latest per key, min lag 1m0s, tombstones kept 1h0m0s, head sealed after 10m0s$`)
	// A segment age younger than the max lag seals the head sooner.
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--segment-age", "1m"}, srv...)...)
	wantLine(t, out, `^\s+segment age:\s+1m0s$`)
	wantLine(t, out, `^\s+compacted:\s+latest per key, min lag 1m0s, tombstones kept 1h0m0s, head sealed after 1m0s$`)
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--segment-age", "0"}, srv...)...)
	if strings.Contains(out, "segment age:") {
		t.Fatalf("segment age still shown after --segment-age 0:\n%s", out)
	}
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--compact=false"}, srv...)...)
	if strings.Contains(out, "compacted:") {
		t.Fatalf("still compacted after --compact=false:\n%s", out)
	}
	// Switched on again, it has the settings it had.
	out = mustRun(t, streamCLI, append([]string{"edit", "PROFILES", "--compact"}, srv...)...)
	wantLine(t, out, `^\s+compacted:\s+latest per key, min lag 1m0s, tombstones kept 1h0m0s, head sealed after 10m0s$`)

	for _, bad := range [][]string{
		{"add", "Y", "--tombstone-retention", "1h"},
		{"add", "Y", "--compact", "--compact-min-lag", "-1s"},
		{"add", "Y", "--compact", "--retention", "workqueue"},
		{"edit", "JOBS", "--tombstone-retention", "1h"},
		{"edit", "PROFILES", "--compact=false", "--compact-min-lag", "1s"},
		{"add", "Z", "--compact", "--compact-min-lag", "1h", "--compact-max-lag", "1m"},
		{"edit", "JOBS", "--partitions", "4"},
		{"add", "X", "--retention", "forever"},
		{"add", "X", "--discard", "middle"},
		{"add", "X", "--sync", "sometimes"},
		{"add", "X", "--compression", "lz4"},
		{"edit", "JOBS", "--compression", "zstd"},
		{"add", "X", "--max-bytes", "lots"},
		{"add", "X", "--partitions", "0"},
		{"add", "X", "--segment-age", "-1s"},
		{"edit", "JOBS", "--segment-age", "-1m"},
		{"add"},
		{"add", "X", "Y"},
		{"add", "bad.name"},
		{"ls", "extra"},
		{"frobnicate"},
	} {
		if _, err := runCLI(t, streamCLI, append(bad, srv...)...); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
	// A second stream on the same subject is refused by the server.
	if _, err := runCLI(t, streamCLI, append([]string{"add", "JOBS2", "--subjects", "JOBS"}, srv...)...); err == nil {
		t.Error("overlapping subjects were accepted")
	}
}

func TestHumanBytes(t *testing.T) {
	if humanBytes(512) != "512 B" || humanBytes(1536) != "1.5 KiB" || humanBytes(3<<30) != "3.0 GiB" {
		t.Errorf("humanBytes: %s %s %s", humanBytes(512), humanBytes(1536), humanBytes(3<<30))
	}
}

func TestStreamAndConsumerHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"stream", "--help"}, []string{"add ", "ls ", "info ", "rm ", "purge ", "get "}},
		{[]string{"consumer", "--help"}, []string{"add ", "ls ", "info ", "next ", "rm "}},
		{[]string{"stream", "add", "--help"}, []string{"--subjects", "--retention limits|workqueue|interest", "--max-age", "--max-bytes bytes", "--max-msgs",
			"--max-msg-size bytes", "--discard old|new", "--partitions", "--dupe-window", "--sync always|interval|never", "--segment-size bytes", "--compression none|s2", "--compact", "--compact-min-lag", "--tombstone-retention", "--json", "--server"}},
		{[]string{"stream", "edit", "--help"}, []string{"--compression none|s2", "--compact", "--tombstone-retention"}},
		{[]string{"stream", "purge", "--help"}, []string{"--subject", "--keep", "--seq", "--partition"}},
		{[]string{"stream", "get", "--help"}, []string{"--seq", "--partition", "--last-subject", "--raw", "--json"}},
		{[]string{"stream", "rm", "--help"}, []string{"-f, --force"}},
		{[]string{"consumer", "add", "--help"}, []string{"--filter", "--deliver", "--ack none|explicit|all", "--ack-wait", "--backoff durations", "--max-deliver",
			"--dead-letter", "--max-ack-pending", "--deliver-subject", "--deliver-group", "--ephemeral", "--inactive-threshold", "--member-timeout"}},
		{[]string{"consumer", "next", "--help"}, []string{"--count", "--wait", "--no-wait", "--no-ack", "--nak", "--term", "--member", "--json"}},
		{[]string{"pub", "--help"}, []string{"--ack", "--msg-id", "--key", "--reply"}},
	} {
		var out bytes.Buffer
		if err := runTern(t.Context(), &out, io.Discard, c.args...); err != nil {
			t.Errorf("tern %v: %v", c.args, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("tern %v lacks %q:\n%s", c.args, w, out.String())
			}
		}
	}
}

func TestStreamUnavailable(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.StoreDir = "" }) // streams disabled
	_, err := runCLI(t, streamCLI, "ls", "--server", s.URL())
	if err == nil || !strings.Contains(err.Error(), "stream API unavailable") {
		t.Fatalf("ls on a server without streams: %v", err)
	}
	_, err = runCLI(t, streamCLI, "ls", "--server", "tern://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("ls without a server: %v", err)
	}
}

func TestBenchStreamModes(t *testing.T) {
	url := startTestServer(t)
	dir := t.TempDir()
	for _, c := range []struct {
		mode string
		args []string
		want []string
	}{
		{loadgen.ModeStreamPub, []string{"--pubs", "2", "--msgs", "500", "--window", "64"},
			[]string{"streampub: 2 publishers -> stream BENCH_", "window 64", "1,000 published, 1,000 acknowledged in", "msgs/s", "ack latency p50"}},
		{loadgen.ModeStreamConsume, []string{"--msgs", "700", "--batch", "50", "--partitions", "2"},
			[]string{"streamconsume: 1 pull consumer <- stream BENCH_", "(2 partitions)", "batch 50", "700 stored (not timed), 700 consumed and acknowledged in", "msgs/s", "fetch round trip p50"}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			path := filepath.Join(dir, c.mode+".json")
			var stdout, stderr bytes.Buffer
			args := append([]string{"--server", url, "--mode", c.mode, "--size", "64", "--json", path}, c.args...)
			if err := runBench(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("bench: %v\n%s%s", err, stderr.String(), stdout.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, stdout.String())
				}
			}
			if strings.Contains(stdout.String(), "missing") {
				t.Errorf("output reports missing messages:\n%s", stdout.String())
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var res loadgen.StreamResult
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			if res.Mode != c.mode || res.Sent == 0 || res.Received != res.Sent || res.Expected != res.Sent || res.Errors != 0 ||
				res.MsgsPerSec <= 0 || res.Latency.Samples == 0 || !strings.HasPrefix(res.Stream, "BENCH_") {
				t.Fatalf("result %+v\n%s", res, b)
			}
		})
	}
	// The streams were deleted; --keep and --stream leave a named one.
	nc, err := tern.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js := nc.Streams()
	if list, err := js.ListStreams(t.Context()); err != nil || len(list) != 0 {
		t.Fatalf("streams after the runs: %v %+v", err, list)
	}
	var stdout bytes.Buffer
	args := []string{"--server", url, "--mode", "streampub", "--msgs", "100", "--stream", "KEEPME", "--keep", "--json", "-"}
	if err := runBench(context.Background(), args, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	info, err := js.StreamInfo(t.Context(), "KEEPME")
	if err != nil || info.State.Msgs != 100 {
		t.Fatalf("kept stream: %v %+v", err, info)
	}
	if !strings.Contains(stdout.String(), `"stream": "KEEPME"`) && !strings.Contains(stdout.String(), `"stream":"KEEPME"`) {
		t.Fatalf("JSON lacks the stream name:\n%s", stdout.String())
	}
}
