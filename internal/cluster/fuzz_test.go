package cluster

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tern-mq/tern/internal/cluster/meta"
	"github.com/tern-mq/tern/internal/replica"
)

// resultSeeds are the answers a leader sends for real commands: a stream and a
// consumer added, a client claimed, refusals of each kind, and a leader's own
// errors.
func resultSeeds() [][]byte {
	s := meta.New()
	var out [][]byte
	apply := func(c *meta.Command) {
		i := s.Applied() + 1
		out = append(out, encodeResult(s.Apply(i, meta.EncodeCommand(c)), i, nil))
	}
	for id := uint64(1); id <= 3; id++ {
		apply(&meta.Command{Op: meta.OpAddNode, Node: &meta.Node{ID: id, Name: "n"}})
	}
	apply(&meta.Command{Op: meta.OpAddStream, Stream: "s", Config: []byte(`{"name":"s","subjects":["s.>"]}`), Replicas: 3, Partitions: 2})
	apply(&meta.Command{Op: meta.OpAddConsumer, Stream: "s", Consumer: "c", Config: []byte(`{"durable_name":"c"}`)})
	apply(&meta.Command{Op: meta.OpClaimClient, Client: "mqtt-1", NodeID: 2})
	apply(&meta.Command{Op: meta.OpClaimClient, Client: "mqtt-1", NodeID: 3})
	apply(&meta.Command{Op: meta.OpAddStream, Stream: "s", Config: []byte(`{}`), Replicas: 3})
	apply(&meta.Command{Op: meta.OpAddConsumer, Stream: "none", Consumer: "c", Config: []byte(`{}`)})
	apply(&meta.Command{Op: meta.OpAddStream, Stream: "t", Config: []byte(`{}`), Replicas: 2})
	for _, err := range []error{replica.ErrNotLeader, replica.ErrProposalDropped, errors.New("disk full")} {
		out = append(out, encodeResult(meta.Result{}, 0, err))
	}
	return out
}

// FuzzDecodeResult: a command's result comes back from the leader, another node.
// Whatever the bytes, decoding gives a result or an error, never a panic; and
// what it gives goes through the encoding again (a result passed on) keeping its
// fields, index and kind of error.
func FuzzDecodeResult(f *testing.F) {
	for _, b := range resultSeeds() {
		f.Add(b)
	}
	f.Add([]byte(`{"code":"no_such_code","error":"x"}`))
	f.Add([]byte(`{"stream":{"config":null,"groups":null},"index":-1}`))
	f.Add([]byte(`{"consumer":7}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, index, err := decodeResult(b)
		if err != nil && index != 0 {
			t.Fatalf("an error with index %d: %v", index, err)
		}
		enc := encodeResult(r, index, err)
		r2, index2, err2 := decodeResult(enc)
		if (err == nil) != (err2 == nil) || index2 != index {
			t.Fatalf("%s: index %d, %v; again from %s: index %d, %v", b, index, err, enc, index2, err2)
		}
		for _, c := range resultCodes {
			if errors.Is(err, c.err) != errors.Is(err2, c.err) || errors.Is(r.Err, c.err) != errors.Is(r2.Err, c.err) {
				t.Fatalf("%s: error %v (result %v), again %v (result %v)", b, err, r.Err, err2, r2.Err)
			}
		}
		if (r.Err == nil) != (r2.Err == nil) {
			t.Fatalf("%s: result error %v, again %v", b, r.Err, r2.Err)
		}
		// The error texts nest on each pass; everything else must be unchanged.
		r.Err, r2.Err = nil, nil
		if a, z := encodeResult(r, index, nil), encodeResult(r2, index2, nil); !bytes.Equal(a, z) {
			t.Fatalf("%s: fields changed on a pass:\n%s\n%s", b, a, z)
		}
	})
}
