package stream_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// startAt runs an in-process server whose streams live in dir.
func startAt(t *testing.T, dir string, mutate func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort = "127.0.0.1", 0, "", dir, 0, 0, -1
	cfg.KafkaPort = -1
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func stop(t *testing.T, s *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestStateSurvivesRestart: stream and consumer definitions, positions and pending
// acks are all still there after a clean restart.
func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "keep", Subjects: []string{"keep.>"}, Partitions: 2, MaxMsgs: 1000})
	for i := 0; i < 20; i++ {
		e.publish("keep.x", strconv.Itoa(i), tern.Key(strconv.Itoa(i)))
	}
	e.addConsumer("keep", tern.ConsumerConfig{Durable: "c", AckWait: tern.Duration(time.Hour)})
	p := e.js.Pull("keep", "c")
	msgs := e.fetch(p, 12)
	acked := map[string]bool{}
	for _, m := range msgs[:8] {
		if err := m.AckSync(e.ctx); err != nil {
			t.Fatal(err)
		}
		acked[string(m.Data)] = true
	}
	// A terminated message is done with for good, restart or not.
	if err := msgs[8].Term("unprocessable"); err != nil {
		t.Fatal(err)
	}
	acked[string(msgs[8].Data)] = true
	waitFor(t, "term applied", func() bool { return e.consumerInfo("keep", "c").NumAckPending == 3 })
	before := e.consumerInfo("keep", "c")
	e.nc.Close()
	stop(t, srv)

	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	info := e.streamInfo("keep")
	if info.State.Msgs != 20 || info.Config.Partitions != 2 || info.Config.MaxMsgs != 1000 {
		t.Fatalf("stream after restart: %+v", info)
	}
	after := e.consumerInfo("keep", "c")
	if after.NumAckPending != 3 || after.NumPending != before.NumPending {
		t.Fatalf("consumer after restart: pending acks %d (want 3), to deliver %d (was %d)",
			after.NumAckPending, after.NumPending, before.NumPending)
	}
	// The 3 delivered-but-unacked come back (after their ack wait, which a restart
	// restarts) and the 8 new ones follow; nothing acked or terminated comes back.
	p = e.js.Pull("keep", "c")
	defer p.Close()
	seen := map[string]int{}
	for _, m := range e.fetch(p, 8) {
		seen[string(m.Data)]++
		_ = m.Ack()
	}
	for k := range seen {
		if acked[k] {
			t.Fatalf("acknowledged message %s delivered again after restart", k)
		}
	}
	// Publishing continues with the next sequences.
	ack := e.publish("keep.x", "after", tern.Key("0"))
	if ack.Seq == 0 {
		t.Fatalf("ack after restart: %+v", ack)
	}
	if st := e.streamInfo("keep").State; st.Msgs != 21 {
		t.Fatalf("messages after restart and one publish: %d", st.Msgs)
	}
}

// ternBinary builds cmd/tern once per test binary.
var ternBinary = sync.OnceValues(func() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "tern-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tern")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tern")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serverProcess is a `tern server` child process.
type serverProcess struct {
	cmd *exec.Cmd
	url string
	log string // path of the combined stdout and stderr
}

func (p *serverProcess) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func startProcess(t *testing.T, dir, sync string) *serverProcess {
	t.Helper()
	bin, err := ternBinary()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "server.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--http", "", "--mqtt-port", "-1", "--kafka-port", "-1", "--udp-port", "-1",
		"--store-dir", dir, "--sync", sync, "--segment-size", "1MiB")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProcess{cmd: cmd, url: "tern://127.0.0.1:" + strconv.Itoa(port), log: logPath}
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s", p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *serverProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// TestKill9KeepsAcknowledgedMessages publishes with acks at full speed while a
// consumer acknowledges, kills the server with SIGKILL at a random moment, restarts
// it, and checks that every acknowledged message is stored exactly once, in order per
// partition, and that the consumer resumes after its confirmed acks. A process crash
// loses nothing acknowledged under every sync policy, because a publish is answered
// only after its record was written to the file (the page cache survives the process).
func TestKill9KeepsAcknowledgedMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs server processes; skipped with -short")
	}
	seeds := uint64(1)
	if n, err := strconv.Atoi(os.Getenv("TERN_KILL9_SEEDS")); err == nil && n > 0 {
		seeds = uint64(n) // soak: TERN_KILL9_SEEDS=20 (make soak)
	}
	for _, policy := range []string{"always", "interval", "never"} {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", policy, seed), func(t *testing.T) { kill9Round(t, policy, seed) })
		}
	}
}

func kill9Round(t *testing.T, policy string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	dir := t.TempDir()
	proc := startProcess(t, dir, policy)
	nc, err := tern.Connect(proc.url, tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := nc.Streams(tern.PublishAsyncMaxPending(512), tern.APITimeout(2*time.Second))
	if _, err := js.AddStream(ctx, tern.StreamConfig{Name: "crash", Subjects: []string{"crash.>"}, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddConsumer(ctx, "crash", tern.ConsumerConfig{Durable: "c", AckWait: tern.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	// Publisher: async with acks as fast as the window allows; remembers what was acked.
	var mu sync.Mutex
	acked := map[int]tern.PubAck{}
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		type inflight struct {
			id int
			f  *tern.PubAckFuture
		}
		var fs []inflight
		collect := func(all bool) {
			kept := fs[:0]
			for _, x := range fs {
				select {
				case <-x.f.Done():
					if ack, err := x.f.Result(); err == nil {
						mu.Lock()
						acked[x.id] = *ack
						mu.Unlock()
					}
				default:
					kept = append(kept, x)
				}
			}
			fs = kept
		}
		for id := 0; id < 2_000_000; id++ {
			select {
			case <-stopPub:
				collect(true)
				return
			default:
			}
			f, err := js.PublishAsync("crash.k", []byte(strconv.Itoa(id)), tern.Key(strconv.Itoa(id%16)))
			if err != nil {
				collect(true)
				return
			}
			fs = append(fs, inflight{id, f})
			if len(fs) >= 256 {
				collect(false)
			}
		}
	}()

	// Consumer: confirmed acks (AckSync) of what it fetched.
	confirmed := map[string]bool{} // "partition/seq"
	var cmu sync.Mutex
	conDone := make(chan struct{})
	go func() {
		defer close(conDone)
		p := js.Pull("crash", "c")
		for {
			msgs, err := p.Fetch(ctx, 64, tern.FetchMaxWait(200*time.Millisecond))
			if err != nil && !errors.Is(err, tern.ErrTimeout) {
				return
			}
			for _, m := range msgs {
				md, err := m.Metadata()
				if err != nil {
					return
				}
				if err := m.AckSync(ctx); err != nil {
					return
				}
				cmu.Lock()
				confirmed[fmt.Sprintf("%d/%d", md.Partition, md.StreamSeq)] = true
				cmu.Unlock()
			}
		}
	}()

	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	proc.kill()
	close(stopPub)
	<-pubDone
	<-conDone
	nc.Close()
	mu.Lock()
	nAcked := len(acked)
	mu.Unlock()
	if nAcked < 100 {
		t.Fatalf("only %d publishes acknowledged before the kill; the test did not load the server", nAcked)
	}

	proc = startProcess(t, dir, policy)
	defer proc.kill()
	nc2, err := tern.Connect(proc.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2 := nc2.Streams()

	// Read everything back in order with an ephemeral no-ack consumer.
	if _, err := js2.AddConsumer(ctx, "crash", tern.ConsumerConfig{Name: "audit", AckPolicy: tern.AckNone}); err != nil {
		t.Fatal(err)
	}
	info, err := js2.StreamInfo(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	total := int(info.State.Msgs)
	p := js2.Pull("crash", "audit")
	count := map[int]int{}
	lastID := map[int]int{}     // per partition
	lastSeq := map[int]uint64{} // per partition
	for got := 0; got < total; {
		msgs, err := p.Fetch(ctx, 1000, tern.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("audit read %d of %d: %v", got, total, err)
		}
		for _, m := range msgs {
			md, _ := m.Metadata()
			id, _ := strconv.Atoi(string(m.Data))
			count[id]++
			if prev, ok := lastID[md.Partition]; ok && id <= prev {
				t.Fatalf("partition %d: message %d after %d", md.Partition, id, prev)
			}
			if md.StreamSeq <= lastSeq[md.Partition] {
				t.Fatalf("partition %d: seq %d after %d", md.Partition, md.StreamSeq, lastSeq[md.Partition])
			}
			lastID[md.Partition], lastSeq[md.Partition] = id, md.StreamSeq
			got++
		}
	}
	for id, ack := range acked {
		if count[id] != 1 {
			t.Fatalf("acknowledged message %d (partition %d seq %d) stored %d times after the crash", id, ack.Partition, ack.Seq, count[id])
		}
	}
	for id, n := range count {
		if n != 1 {
			t.Fatalf("message %d stored %d times", id, n)
		}
	}

	// The durable consumer resumes after its confirmed acks: none of them comes back.
	ci, err := js2.ConsumerInfo(ctx, "crash", "c")
	if err != nil {
		t.Fatal(err)
	}
	pc := js2.Pull("crash", "c")
	redelivered := 0
	for {
		msgs, err := pc.Fetch(ctx, 1000, tern.FetchNoWait())
		if err != nil {
			break
		}
		for _, m := range msgs {
			md, _ := m.Metadata()
			if confirmed[fmt.Sprintf("%d/%d", md.Partition, md.StreamSeq)] {
				t.Fatalf("confirmed ack of partition %d seq %d lost in the crash", md.Partition, md.StreamSeq)
			}
			redelivered++
		}
	}
	t.Logf("%s seed %d: %d acked publishes (%d stored), %d confirmed consumer acks, consumer had %d pending acks and %d to deliver",
		policy, seed, nAcked, total, len(confirmed), ci.NumAckPending, ci.NumPending)
	if strings.Contains(proc.output(), "panic") {
		t.Fatalf("server log shows a panic:\n%s", proc.output())
	}
}
