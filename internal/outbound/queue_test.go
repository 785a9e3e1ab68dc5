package outbound

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// endpoint is a test connection: the server side of a loopback TCP pair.
type endpoint struct {
	nc      net.Conn
	stopped atomic.Int32 // StopReading calls
	idle    atomic.Int32 // WriterStopped calls
}

func (e *endpoint) Socket() (net.Conn, error) { return e.nc, nil }
func (e *endpoint) StopReading()              { e.stopped.Add(1) }
func (e *endpoint) WriterStopped()            { e.idle.Add(1) }
func (e *endpoint) AppendSlowGoodbye(b []byte, pending, limit int64) []byte {
	return append(b, "BYE"...)
}

// pair returns a queue writing to the server side of a loopback TCP connection, and
// the client side.
func pair(t *testing.T, cfg Config) (*Queue, *endpoint, *Group, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	g, err := NewGroup(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := &endpoint{nc: server}
	q := new(Queue)
	q.Init(g, ep)
	return q, ep, g, client.(*net.TCPConn)
}

func appendMsg(t *testing.T, q *Queue, payload string) bool {
	t.Helper()
	b, ok := q.Reserve(len(payload))
	if !ok {
		return false
	}
	q.Commit(append(b, payload...), len(payload))
	return true
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return buf
}

func TestWritesInOrderAndWriterComesAndGoes(t *testing.T) {
	q, ep, _, client := pair(t, Config{MaxPending: 64 << 20})
	// A little is written inline by Flush's caller: no writer goroutine.
	appendMsg(t, q, "abc")
	appendMsg(t, q, "def")
	q.Flush()
	if got := readN(t, client, 6); string(got) != "abcdef" {
		t.Fatalf("read %q", got)
	}
	if q.WriterRunning() || ep.idle.Load() != 0 {
		t.Fatalf("small flush left a writer (running %v, stopped %d times)", q.WriterRunning(), ep.idle.Load())
	}
	// More than InlineFlushMax goes to a writer goroutine, which ends once idle; a
	// Flush starts another.
	big := string(bytes.Repeat([]byte("b"), InlineFlushMax+1))
	for i := 0; i < 3; i++ {
		appendMsg(t, q, big)
		q.Flush()
		if !q.WriterRunning() {
			t.Fatalf("round %d: no writer for a large flush", i)
		}
		if got := readN(t, client, len(big)); string(got) != big {
			t.Fatalf("round %d: read %d bytes", i, len(got))
		}
		deadline := time.Now().Add(5 * time.Second)
		for q.WriterRunning() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if q.WriterRunning() {
			t.Fatalf("writer still running %v after its last write", 5*time.Second)
		}
		// The writer lets the role go, then says it stopped.
		for ep.idle.Load() != int32(i+1) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := ep.idle.Load(); got != int32(i+1) {
			t.Fatalf("WriterStopped called %d times, want %d", got, i+1)
		}
	}
	c := q.Counters()
	if c.OutMsgs != 5 || c.OutBytes != uint64(6+3*len(big)) || c.Dropped != 0 || c.Slow {
		t.Fatalf("counters %+v", c)
	}
	if !q.Release(nil) || q.Pending() != 0 {
		t.Fatal("an idle queue did not release its state")
	}
}

// TestInlineFlushHandsOverWhenSocketIsFull: an inline flush that finds the socket
// full waits at most InlineFlushWait, and a writer goroutine sends the rest in order.
func TestInlineFlushHandsOverWhenSocketIsFull(t *testing.T) {
	q, _, _, client := pair(t, Config{MaxPending: 256 << 20})
	var want []byte
	small := bytes.Repeat([]byte("0123456789abcdef"), InlineFlushMax/16/2)
	for i := 0; i < 2000; i++ { // far more than the socket buffers hold
		msg := append([]byte{byte(i)}, small...)
		want = append(want, msg...)
		b, _ := q.Reserve(len(msg))
		q.Commit(append(b, msg...), len(msg))
		start := time.Now()
		q.Flush()
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Flush blocked %v", d)
		}
	}
	got := make([]byte, len(want))
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := io.ReadFull(client, got); err != nil {
		t.Fatalf("read %d of %d bytes: %v (pending %d, writer running %v, reason %v)", n, len(want), err, q.Pending(), q.WriterRunning(), q.Reason())
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes out of order or lost across the inline flush's hand-over")
	}
	q.Close(nil)
	q.Finish()
}

func TestSlowConsumerDropCountsOnce(t *testing.T) {
	q, _, g, _ := pair(t, Config{MaxPending: 1000, Policy: PolicyDrop})
	payload := string(bytes.Repeat([]byte("x"), 100))
	for i := 0; i < 10; i++ {
		if !appendMsg(t, q, payload) {
			t.Fatalf("message %d refused under the limit", i)
		}
	}
	for i := 0; i < 5; i++ {
		if appendMsg(t, q, payload) {
			t.Fatal("message over the pending limit was queued")
		}
	}
	c := q.Counters()
	if c.Dropped != 5 || !c.Slow || c.OutMsgs != 10 {
		t.Fatalf("counters %+v, want 5 dropped, slow, 10 out", c)
	}
	var t0 Totals
	g.AddGone(&t0)
	if t0.SlowConsumers != 1 {
		t.Fatalf("slow consumers %d, want 1 for one connection", t0.SlowConsumers)
	}
	if q.Closed() {
		t.Fatal("drop policy closed the connection")
	}
	var live Totals
	live.AddLive(q, 3, 30)
	g.Retire(q, 3, 30)
	var gone Totals
	g.AddGone(&gone)
	if gone.Dropped != 5 || gone.OutMsgs != 10 || gone.OutBytes != 1000 || gone.InMsgs != 3 || gone.InBytes != 30 || gone.SlowConsumers != 1 {
		t.Fatalf("group totals %+v", gone)
	}
	if live.Connections != 1 || live.Dropped != gone.Dropped || live.OutMsgs != gone.OutMsgs || live.InBytes != gone.InBytes {
		t.Fatalf("a live connection counts %+v, retired %+v", live, gone)
	}
}

func TestSlowConsumerDisconnectSendsGoodbyeAfterBacklog(t *testing.T) {
	q, ep, _, client := pair(t, Config{MaxPending: 1000, Policy: PolicyDisconnect})
	for i := 0; i < 10; i++ {
		appendMsg(t, q, "0123456789"+string(bytes.Repeat([]byte("y"), 90)))
	}
	if appendMsg(t, q, "over") {
		t.Fatal("message over the limit was queued")
	}
	if !q.Closed() || !errors.Is(q.Reason(), ErrSlowConsumer) || ep.stopped.Load() != 1 {
		t.Fatalf("closed %v reason %v stop-reading calls %d", q.Closed(), q.Reason(), ep.stopped.Load())
	}
	if _, ok := q.Begin(); ok {
		t.Fatal("Begin on a closed queue succeeded")
	}
	done := make(chan struct{})
	go func() { q.Finish(); close(done) }()
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(all) != 1003 || string(all[1000:]) != "BYE" {
		t.Fatalf("read %d bytes ending %q, want the 1000-byte backlog then BYE", len(all), all[max(0, len(all)-3):])
	}
	<-done
}

func TestFlowControlStallsThenReleases(t *testing.T) {
	q, _, g, client := pair(t, Config{MaxPending: 64 << 20})
	if q.Stall() != nil {
		t.Fatal("empty queue stalls")
	}
	big := bytes.Repeat([]byte("z"), int(g.stallAt)+1)
	b, _ := q.Reserve(len(big))
	q.Commit(append(b, big...), len(big))
	ch := q.Stall()
	if ch == nil {
		t.Fatal("queue over the stall backlog does not ask publishers to wait")
	}
	q.Flush()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("stall not released by the writer's progress")
	}
}

func TestStuckWriterStopsStalling(t *testing.T) {
	q, _, g, client := pair(t, Config{MaxPending: 256 << 20})
	_ = client.SetReadBuffer(4 << 10)
	// Far more than the socket buffers hold: the writer blocks, making no progress.
	chunk := bytes.Repeat([]byte("s"), 1<<20)
	for i := 0; i < 32; i++ {
		b, _ := q.Reserve(len(chunk))
		q.Commit(append(b, chunk...), len(chunk))
	}
	q.Flush()
	time.Sleep(StuckAfter + 200*time.Millisecond)
	b, _ := q.Reserve(len(chunk))
	q.Commit(append(b, chunk...), len(chunk))
	if q.Stall() == nil {
		t.Fatal("expected a stall while the backlog is over the threshold")
	}
	q.Stuck()
	b, _ = q.Reserve(len(chunk))
	q.Commit(append(b, chunk...), len(chunk))
	if ch := q.Stall(); ch != nil {
		select {
		case <-ch:
		default:
			t.Fatalf("a stuck queue still asks publishers to wait (pending %d, threshold %d)", q.Pending(), g.stallAt)
		}
	}
	q.Close(errors.New("test over"))
	client.Close()
	q.Finish()
}

// TestGracefulCloseClientReadsGoodbye: a client that keeps sending while the server
// ends the connection after a goodbye reads the goodbye and a clean end of stream,
// and its own writes are not answered with a reset before it has read them.
func TestGracefulCloseClientReadsGoodbye(t *testing.T) {
	testGracefulClose(t, 2*time.Second)
}

func testGracefulClose(t *testing.T, linger time.Duration) {
	q, _, _, client := pair(t, Config{MaxPending: 1 << 20, Linger: linger})
	stop := make(chan struct{})
	writeErr := make(chan error, 1)
	go func() {
		junk := bytes.Repeat([]byte("j"), 4<<10)
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; i < 1<<20 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				writeErr <- nil
				return
			default:
			}
			_ = client.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := client.Write(junk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()
	time.Sleep(50 * time.Millisecond) // unread input piles up on the server side
	q.Append(func(b []byte) []byte { return append(b, "GOODBYE"...) })
	q.CloseAfterGoodbye(errors.New("told"))
	finished := make(chan struct{})
	go func() { q.Finish(); close(finished) }()
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	close(stop)
	if werr := <-writeErr; werr != nil {
		t.Fatalf("client's write failed (%v) before it read the end of the stream", werr)
	}
	if err != nil || string(got) != "GOODBYE" {
		t.Fatalf("client read %q then %v, want GOODBYE and a clean end", got, err)
	}
	client.Close()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("Finish did not return after the client closed")
	}
}

func TestWriteFailureClosesAndStopsReader(t *testing.T) {
	q, ep, _, client := pair(t, Config{MaxPending: 64 << 20, WriteTimeout: 200 * time.Millisecond})
	_ = client.SetReadBuffer(4 << 10)
	chunk := bytes.Repeat([]byte("w"), 1<<20)
	for i := 0; i < 16; i++ {
		b, _ := q.Reserve(len(chunk))
		q.Commit(append(b, chunk...), len(chunk))
	}
	q.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for !q.Closed() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !q.Closed() || ep.stopped.Load() != 1 {
		t.Fatalf("a write past its timeout left the queue open (closed %v, stop-reading %d)", q.Closed(), ep.stopped.Load())
	}
	var ne net.Error
	if !errors.As(q.Reason(), &ne) || !ne.Timeout() {
		t.Fatalf("reason %v, want a write timeout", q.Reason())
	}
	q.Finish()
}

func TestQueueDeliveryDoesNotAllocate(t *testing.T) {
	q, _, _, client := pair(t, Config{MaxPending: 64 << 20})
	go func() { _, _ = io.Copy(io.Discard, client) }()
	payload := []byte("0123456789abcdef")
	for i := 0; i < 1000; i++ { // warm the buffers up
		b, _ := q.Reserve(len(payload))
		q.Commit(append(b, payload...), len(payload))
	}
	q.Flush()
	allocs := testing.AllocsPerRun(1000, func() {
		b, ok := q.Reserve(len(payload))
		if ok {
			q.Commit(append(b, payload...), len(payload))
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per delivery, want 0", allocs)
	}
	q.Close(nil)
	q.Finish()
}

func BenchmarkReserveCommit(b *testing.B) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	client, _ := net.Dial("tcp", l.Addr().String())
	server, _ := l.Accept()
	defer client.Close()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	g, _ := NewGroup(Config{MaxPending: 64 << 20, WriteTimeout: 5 * time.Second}, nil)
	q := new(Queue)
	q.Init(g, &endpoint{nc: server})
	payload := []byte("0123456789abcdef")
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for i := 0; b.Loop(); i++ {
		buf, ok := q.Reserve(len(payload))
		if ok {
			q.Commit(append(buf, payload...), len(payload))
		}
		if i%64 == 0 {
			q.Flush()
		}
	}
	q.Close(nil)
	q.Finish()
}

// TestQueueStaysSmall: every idle MQTT connection embeds a Queue; what it needs only
// while sending or once closed belongs in its state.
func TestQueueStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(Queue{}); size > 56 {
		t.Fatalf("Queue is %d bytes, want at most 56", size)
	}
}

// A burst queued into an empty buffer grows it by doubling: a few reallocations
// for megabytes of frames, not the dozens append's quarter steps would take.
func TestReserveGrowsGeometrically(t *testing.T) {
	q, _, _, _ := pair(t, Config{MaxPending: 64 << 20})
	frame := bytes.Repeat([]byte("m"), 1024)
	grown, lastCap := 0, -1
	for range 16 << 10 { // 16 MiB, never flushed
		b, ok := q.Reserve(len(frame))
		if !ok {
			t.Fatal("refused below MaxPending")
		}
		if cap(b) != lastCap {
			grown, lastCap = grown+1, cap(b)
		}
		q.Commit(append(b, frame...), len(frame))
	}
	if grown > 16 {
		t.Fatalf("the buffer was reallocated %d times for 16 MiB, want at most 16", grown)
	}
	q.Close(nil)
}

// The writer keeps a large buffer as its spare while frames keep coming, and lets
// it go once the burst is over.
func TestWriterKeepsBusyBuffersAndDropsBurstOnes(t *testing.T) {
	q, _, _, _ := pair(t, Config{MaxPending: 64 << 20})
	big := 4 * MaxIdleBuffer
	for _, c := range []struct {
		name           string
		carried, since int
		kept           bool
	}{
		{"steady flow", big, big / 2, true},
		{"written full, nothing since", big, 0, true},
		{"little written, much since", big / 8, big / 2, true},
		{"burst over", big / 8, 1024, false},
	} {
		st := q.stateLocked()
		st.out = make([]byte, c.since)
		q.wrote(st, make([]byte, c.carried, big))
		if kept := cap(st.spare) == big; kept != c.kept {
			t.Errorf("%s: spare of capacity %d, kept %v, want %v", c.name, cap(st.spare), kept, c.kept)
		}
	}
	q.Close(nil)
}

// TestHandQueuesWithoutCopying: a frame handed over whole is sent from the
// caller's own buffer, without its head room, before what is queued after it;
// a hand-over while something is queued is refused and leaves the queue as it was;
// the buffers go round between the caller and the queue.
func TestHandQueuesWithoutCopying(t *testing.T) {
	q, _, _, client := pair(t, Config{MaxPending: 64 << 20})
	const room = 16
	frame := func(fill byte, n int) []byte {
		b := make([]byte, room+n, room+n+8)
		for i := range b[:room] {
			b[i] = 'x' // head room: never sent
		}
		for i := range b[room:] {
			b[room+i] = fill
		}
		return b
	}
	big := frame('a', 300<<10) // past InlineFlushMax: a writer goroutine sends it
	back, ok := q.Hand(big, room)
	if !ok {
		t.Fatal("Hand refused an empty queue")
	}
	if len(back) != 0 {
		t.Fatalf("Hand gave back %d bytes, want an empty buffer", len(back))
	}
	if q.Pending() != 300<<10 {
		t.Fatalf("pending %d after Hand, want %d (head room not counted)", q.Pending(), 300<<10)
	}
	if !appendMsg(t, q, "after") {
		t.Fatal("append after Hand refused")
	}
	if _, ok := q.Hand(frame('b', 10), room); ok {
		t.Fatal("Hand took a frame while something was queued")
	}
	q.Flush()
	got := readN(t, client, 300<<10+len("after"))
	if want := append(bytes.Repeat([]byte{'a'}, 300<<10), "after"...); !bytes.Equal(got, want) {
		t.Fatalf("sent %q…%q, want the frame without its head room, then the message", got[:8], got[len(got)-8:])
	}
	// The written buffer comes back as the larger one on the next hand-over.
	deadline := time.Now().Add(5 * time.Second)
	for q.Pending() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	small := frame('c', 100)
	back, ok = q.Hand(small, room)
	if !ok {
		t.Fatal("Hand refused a drained queue")
	}
	if cap(back) < 300<<10 {
		t.Errorf("Hand gave back a buffer of %d bytes, want the written one (≥ %d)", cap(back), 300<<10)
	}
	q.Flush()
	if got := readN(t, client, 100); !bytes.Equal(got, bytes.Repeat([]byte{'c'}, 100)) {
		t.Fatalf("second hand-over sent %q", got)
	}
	// Finish sends a handed frame still queued, head room skipped.
	if _, ok := q.Hand(frame('d', 50), room); !ok {
		t.Fatal("Hand refused")
	}
	q.Finish()
	if got := readN(t, client, 50); !bytes.Equal(got, bytes.Repeat([]byte{'d'}, 50)) {
		t.Fatalf("Finish sent %q", got)
	}
	if _, ok := q.Hand(frame('e', 5), room); ok {
		t.Fatal("Hand queued on a closed queue")
	}
}
