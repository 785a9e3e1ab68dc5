package stream_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
)

// TestCorruptSegmentIsReported flips one byte inside a sealed segment while the
// server is down; on restart the stream reports the damage with its name and the
// affected sequence, and every other message is still readable.
func TestCorruptSegmentIsReported(t *testing.T) {
	dir := t.TempDir()
	small := func(c *server.Config) { c.SegmentSize = 64 << 10 }
	srv := startAt(t, dir, small)
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "damaged"})
	payload := strings.Repeat("x", 1000)
	const n = 300
	for i := 0; i < n; i++ {
		e.publish("damaged", payload+strconv.Itoa(i))
	}
	e.nc.Close()
	stop(t, srv)

	segs, _ := filepath.Glob(filepath.Join(dir, "streams", "damaged", "p0", "*.log"))
	sort.Strings(segs)
	if len(segs) < 3 {
		t.Fatalf("want several segments, have %v", segs)
	}
	victim := segs[1] // sealed: not the last
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}

	srv = startAt(t, dir, small)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	info := e.streamInfo("damaged")
	if len(info.Corrupt) == 0 {
		t.Fatal("flipped byte in a sealed segment not reported")
	}
	report := strings.Join(info.Corrupt, "; ")
	if !strings.Contains(report, "damaged") || !strings.Contains(report, filepath.Base(victim)) {
		t.Fatalf("corruption report does not name the stream and file: %s", report)
	}
	t.Logf("reported: %s", report)
	lost := n - int(info.State.Msgs)
	if lost < 0 || lost > 2 {
		// One record is damaged; at most its neighbour is hard to resynchronise on.
		t.Fatalf("%d messages unreadable after one flipped byte (state %+v)", lost, info.State)
	}
	// Everything else reads back in order.
	e.addConsumer("damaged", tern.ConsumerConfig{Name: "all", AckPolicy: tern.AckNone})
	p := e.js.Pull("damaged", "all")
	defer p.Close()
	got := 0
	for {
		msgs, err := p.Fetch(e.ctx, 500, tern.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			break
		}
		got += len(msgs)
	}
	if got < n-2 {
		t.Fatalf("read back %d of %d messages", got, n)
	}
}

// TestFullDisk fills a small tmpfs: publishers get a clear error, nothing
// acknowledged is lost, and publishing works again once space is freed.
func TestFullDisk(t *testing.T) {
	dir := smallDisk(t)
	srv := startAt(t, dir, func(c *server.Config) { c.SegmentSize = 1 << 20 })
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "full"})
	payload := []byte(strings.Repeat("d", 1024))
	acked := 0
	var failure error
	for i := 0; i < 10000; i++ {
		_, err := e.js.Publish(e.ctx, "full", payload)
		if err != nil {
			failure = err
			break
		}
		acked++
	}
	var ae *tern.APIError
	if failure == nil || !errors.As(failure, &ae) || ae.Code != 503 || !strings.Contains(ae.Description, "no space") {
		t.Fatalf("after %d publishes: want a 503 'no space' error, got %v", acked, failure)
	}
	t.Logf("disk full after %d acknowledged 1 KiB messages: %v", acked, failure)
	if got := e.streamInfo("full").State.Msgs; got != uint64(acked) {
		t.Fatalf("stream holds %d messages, %d were acknowledged", got, acked)
	}
	// A new stream cannot be made on the full disk: 503, and nothing half-made is
	// left to list or to trip over at the next start.
	var sae *tern.APIError
	if _, err := e.js.AddStream(e.ctx, tern.StreamConfig{Name: "more", Subjects: []string{"more.>"}}); !errors.As(err, &sae) || sae.Code != 503 {
		t.Fatalf("create a stream on a full disk: %v, want a 503", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "streams", "more")); !os.IsNotExist(err) {
		t.Fatalf("a half-made stream directory is left: %v", err)
	}
	// The server is still healthy for everything else.
	if list, err := e.js.ListStreams(e.ctx); err != nil || len(list) != 1 {
		t.Fatalf("streams after the failed create: %d, %v", len(list), err)
	}
	// Free space and publish again.
	if _, err := e.js.PurgeStream(e.ctx, "full", &tern.PurgeRequest{Keep: 100}); err != nil {
		t.Fatal(err)
	}
	ack, err := e.js.Publish(e.ctx, "full", payload)
	if err != nil {
		t.Fatalf("publish after freeing space: %v", err)
	}
	if ack.Seq != uint64(acked+1) {
		t.Fatalf("sequence after the failed publishes: %d, want %d", ack.Seq, acked+1)
	}
	e.nc.Close()
	stop(t, srv)

	// And after a restart everything acknowledged and kept is there.
	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	if st := e.streamInfo("full").State; st.Msgs != 101 || st.LastSeq != uint64(acked+1) {
		t.Fatalf("after restart: %+v", st)
	}
}

// smallDisk mounts a 4 MiB tmpfs for the test to fill.
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("TERN_NO_MOUNT") == "1" {
			t.Skipf("cannot mount a tmpfs (%v: %s) and TERN_NO_MOUNT=1", err, out)
		}
		t.Fatalf("mount tmpfs for the full-disk test: %v: %s (run as root, or set TERN_NO_MOUNT=1 to skip)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillDisk writes path until the file system has not a byte left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{64 << 10, 4 << 10, 1} {
		chunk := make([]byte, size)
		for i := 0; i < 1<<16; i++ {
			if _, err := f.Write(chunk); err != nil {
				break
			}
		}
	}
}

// TestAckSyncOnFullDisk: an AckSync the consumer's journal could not store fails
// with a 503 instead of confirming; once there is room again, acking again succeeds,
// and after a restart no message whose AckSync succeeded comes back.
func TestAckSyncOnFullDisk(t *testing.T) {
	dir := smallDisk(t)
	srv := startAt(t, dir, nil)
	e := connectEnv(t, srv)
	e.addStream(tern.StreamConfig{Name: "acks", Subjects: []string{"acks.>"}})
	const n = 600
	for i := 0; i < n; i++ {
		e.publish("acks.x", strconv.Itoa(i))
	}
	e.addConsumer("acks", tern.ConsumerConfig{Durable: "c", AckWait: tern.Duration(time.Hour)})
	p := e.js.Pull("acks", "c")
	msgs := e.fetch(p, n)
	p.Close()

	filler := filepath.Join(dir, "filler")
	fillDisk(t, filler)
	var failed []*tern.Msg
	for _, m := range msgs {
		err := m.AckSync(e.ctx)
		if err == nil {
			continue
		}
		var ae *tern.APIError
		if !errors.As(err, &ae) || ae.Code != 503 || !strings.Contains(ae.Description, "no space") {
			t.Fatalf("AckSync on a full disk: %v, want a 503 'no space' error", err)
		}
		failed = append(failed, m)
	}
	if len(failed) == 0 {
		t.Fatalf("all %d AckSyncs succeeded on a full disk", n)
	}
	t.Logf("%d of %d AckSyncs failed on the full disk", len(failed), n)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for _, m := range failed {
		if err := m.AckSync(e.ctx); err != nil {
			t.Fatalf("AckSync again after freeing space: %v", err)
		}
	}
	e.nc.Close()
	stop(t, srv)

	srv = startAt(t, dir, nil)
	defer stop(t, srv)
	e = connectEnv(t, srv)
	if info := e.consumerInfo("acks", "c"); info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("after restart: %d awaiting ack, %d to deliver; want none", info.NumAckPending, info.NumPending)
	}
}
