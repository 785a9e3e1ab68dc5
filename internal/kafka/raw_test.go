package kafka_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// raw is a Kafka connection driven request by request, for what real clients do
// not send: unknown APIs and versions, malformed frames, corrupt batches.
type raw struct {
	t    *testing.T
	c    net.Conn
	corr int32
	f    *kmsg.RequestFormatter
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, c: c, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))}
}

// write sends bytes as they are.
func (r *raw) write(b []byte) {
	r.t.Helper()
	_ = r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// send sends req at its version and returns the correlation id.
func (r *raw) send(req kmsg.Request) int32 {
	r.corr++
	r.write(r.f.AppendRequest(nil, req, r.corr))
	return r.corr
}

// readFrame reads one answer: its correlation id and the rest.
func (r *raw) readFrame() (int32, []byte, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var hdr [8]byte
	if _, err := io.ReadFull(r.c, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:])) - 4
	body := make([]byte, n)
	if _, err := io.ReadFull(r.c, body); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(hdr[4:])), body, nil
}

// answer reads the next answer, which must be the one to request corr (the i-th
// read), and returns its body.
func (r *raw) answer(i int, corr int32) []byte {
	r.t.Helper()
	got, body, err := r.readFrame()
	if err != nil {
		r.t.Fatal(err)
	}
	if got != corr {
		r.t.Fatalf("answer %d is to request %d, want %d", i, got, corr)
	}
	return body
}

// do sends req and decodes its answer.
func (r *raw) do(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	corr := r.send(req)
	got, body, err := r.readFrame()
	if err != nil {
		r.t.Fatalf("%s v%d: reading the answer: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	if got != corr {
		r.t.Fatalf("answer to request %d, want %d", got, corr)
	}
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		body = body[1:] // empty tagged fields of the header
	}
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("%s v%d: decoding the answer: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// closed reports whether the server closed the connection (within a few seconds).
func (r *raw) closed() bool {
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := r.c.Read(b[:])
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}
