package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tern-mq/tern/internal/testenv"
)

// streamsApp is testdata/kstreams/WordCount.java running as a child process.
type streamsApp struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *testenv.Buffer
	done   chan error
}

// startWordCount runs the word count application against addr and waits until
// Kafka Streams says it is RUNNING (its tasks assigned).
func startWordCount(t *testing.T, addr, appID, stateDir, input, output string) *streamsApp {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("testdata", "kstreams", "WordCount.java"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	a := &streamsApp{t: t, lines: make(chan string, 64), stderr: &testenv.Buffer{}, done: make(chan error, 1)}
	a.cmd = javaCmd(ctx, t, src, addr, appID, stateDir, input, output)
	a.cmd.Stderr = a.stderr
	if a.stdin, err = a.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := a.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
		close(a.lines)
		a.done <- a.cmd.Wait()
	}()
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
		}
	})
	start := time.Now()
	a.waitLine("state RUNNING", 2*time.Minute)
	t.Logf("word count running after %v", time.Since(start).Round(time.Millisecond))
	return a
}

// waitLine waits for the application to print want.
func (a *streamsApp) waitLine(want string, d time.Duration) {
	a.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-a.lines:
			if !ok {
				a.t.Fatalf("word count ended before printing %q:\n%s", want, a.stderr)
			}
			if l == want {
				return
			}
		case <-timeout:
			a.t.Fatalf("word count did not print %q in %v:\n%s", want, d, a.stderr)
		}
	}
}

// stop closes the application's standard input, which closes Kafka Streams
// cleanly, and waits for it to exit.
func (a *streamsApp) stop() {
	a.t.Helper()
	_ = a.stdin.Close()
	start := time.Now()
	a.waitLine("closed", time.Minute)
	a.t.Logf("word count closed in %v", time.Since(start).Round(time.Millisecond))
	if err := <-a.done; err != nil {
		a.t.Fatalf("word count: %v\n%s", err, a.stderr)
	}
}

// wordLines produces n lines of words to topic and adds what it produced to
// counts; every word of words is in the lines.
func wordLines(t *testing.T, cl *kgo.Client, topic string, first, n int, counts map[string]int) {
	t.Helper()
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
	var recs []*kgo.Record
	for i := first; i < first+n; i++ {
		line := []string{words[i%len(words)], words[(i*5+1)%len(words)], words[(i/3)%len(words)]}
		for _, w := range line {
			counts[w]++
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "line-%d", i), Value: []byte(strings.Join(line, " ") + ".")})
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitCounts reads topic from its start until each key's latest value is the
// count want gives it.
func waitCounts(t *testing.T, addr, topic string, want map[string]int) {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := map[string]int{}
	for !maps.Equal(got, want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("counts in %s: %v, want %v", topic, got, want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			var n int
			if _, err := fmt.Sscan(string(r.Value), &n); err != nil {
				t.Fatalf("count %q of %q: %v", r.Value, r.Key, err)
			}
			got[string(r.Key)] = n
		})
	}
}

// TestKafkaStreamsWordCount: a Kafka Streams application (Kafka's own library,
// 4.4.0) counts words in a state store. Streams makes its repartition topic
// and its store's changelog topic (cleanup.policy=compact) through the admin
// API, joins a consumer group with its own assignor, commits offsets, and
// deletes repartitioned records it has processed. With its local state
// deleted, a second run restores the counts from the compacted changelog —
// after Tern has compacted it — and goes on counting from them.
func TestKafkaStreamsWordCount(t *testing.T) {
	s, addr := startTern(t, fastGroups)
	adm := kadm.NewClient(newClient(t, addr))
	createTopic(t, adm, "wc-input", 2)
	cl := newClient(t, addr)
	want := map[string]int{}
	wordLines(t, cl, "wc-input", 0, 300, want)

	stateDir := t.TempDir()
	app := startWordCount(t, addr, "wc", stateDir, "wc-input", "wc-output")
	waitCounts(t, addr, "wc-output", want)
	app.stop()

	changelog := "wc-counts-changelog"
	if got := describedConfigs(t, adm, changelog)["cleanup.policy"]; got != "compact" {
		t.Fatalf("%s: cleanup.policy %q, want compact", changelog, got)
	}
	st, err := s.Streams().Stream(changelog)
	if err != nil {
		t.Fatal(err)
	}
	// 900 updates of 6 keys in 4 KiB segments: most are superseded outside the
	// head segments (from the front of the partitions, or between records kept).
	compacted := func() bool {
		var kept, written uint64
		for _, p := range st.Info().State.Parts {
			kept, written = kept+p.Msgs, written+p.LastSeq
		}
		return kept < written/2
	}
	if !pollUntil(15*time.Second, compacted) {
		t.Fatalf("%s not compacted: %+v", changelog, st.Info().State)
	}
	t.Logf("%s after compaction: %+v", changelog, st.Info().State)

	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	wordLines(t, cl, "wc-input", 300, 120, want)
	app = startWordCount(t, addr, "wc", t.TempDir(), "wc-input", "wc-output")
	waitCounts(t, addr, "wc-output", want)
	app.stop()
}
