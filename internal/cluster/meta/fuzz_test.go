package meta

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzApply: any bytes in the log are a command or ErrBadCommand, never a panic, and
// the state after them survives a snapshot round trip unchanged.
func FuzzApply(f *testing.F) {
	for _, c := range randomCommands(rand.New(rand.NewPCG(1, 2)), 40) {
		f.Add(c)
	}
	f.Add([]byte(`{"op":"add_stream","stream":"s","config":{},"replicas":3,"partitions":1024}`))
	f.Add([]byte(`{"op":"evict_node","node_id":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		for i := 1; i <= 3; i++ {
			s.Apply(uint64(i), EncodeCommand(&Command{Op: OpAddNode, Node: &Node{ID: uint64(i), Name: "n"}}))
		}
		s.Apply(4, data)
		s.Apply(5, data)
		snap := s.Snapshot()
		r := New()
		if err := r.Restore(snap); err != nil {
			t.Fatalf("restoring a snapshot of a live state: %v", err)
		}
		if !bytes.Equal(r.Snapshot(), snap) {
			t.Fatal("snapshot round trip changed the state")
		}
	})
}

// FuzzRestore: a snapshot from disk or a peer either restores or is refused with an
// error that leaves the state as it was.
func FuzzRestore(f *testing.F) {
	a := New()
	for i, c := range randomCommands(rand.New(rand.NewPCG(3, 4)), 60) {
		a.Apply(uint64(i+1), c)
	}
	f.Add(a.Snapshot())
	f.Add(New().Snapshot())
	f.Add([]byte(`{"applied":1,"next_group":1,"streams":[{"name":"s","groups":[{"group":99}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		s.Apply(1, EncodeCommand(&Command{Op: OpAddNode, Node: &Node{ID: 1, Name: "n"}}))
		before := s.Snapshot()
		if err := s.Restore(data); err != nil {
			if !bytes.Equal(s.Snapshot(), before) {
				t.Fatal("a refused snapshot changed the state")
			}
			return
		}
		snap := s.Snapshot()
		r := New()
		if err := r.Restore(snap); err != nil {
			t.Fatalf("re-restoring: %v", err)
		}
		if !bytes.Equal(r.Snapshot(), snap) {
			t.Fatal("snapshot round trip changed the state")
		}
		// The restored state keeps working.
		s.Apply(s.Applied()+1, EncodeCommand(&Command{Op: OpAddStream, Stream: "new", Config: []byte(`{}`), Replicas: 1}))
	})
}
