package consumer

import (
	"reflect"
	"testing"
)

// TestReplayAppliedIndex: a chunk's applied record raises State.Applied, and a
// delivery record replayed after its ack would make the message pending again —
// which is why a replica skips the entries up to State.Applied.
func TestReplayAppliedIndex(t *testing.T) {
	st := State{Parts: make([]PartState, 1)}
	deliver := AppendRecord(nil, RecDelivered, 0, 5, 1)
	chunk := append(append([]byte(nil), deliver...), AppendRecord(nil, RecApplied, 10)...)
	ack := append(AppendRecord(nil, RecAcked, 0, 5), AppendRecord(nil, RecApplied, 11)...)
	if n := Replay(&st, [][]byte{chunk, ack}); n != 2 {
		t.Fatalf("%d chunks replayed, want 2", n)
	}
	if st.Applied != 11 || len(st.Parts[0].Pending) != 0 || st.Parts[0].Next != 6 {
		t.Fatalf("state %+v, want applied 11, nothing pending, next 6", st)
	}
	again := st
	Replay(&again, [][]byte{deliver})
	if len(again.Parts[0].Pending) != 1 {
		t.Fatalf("a delivery replayed after its ack: %+v (the replica must skip it by index)", again)
	}
	if Replay(&st, [][]byte{AppendRecord(nil, RecApplied)}) != 0 {
		t.Fatal("an applied record without its index was accepted")
	}
}

// A record naming a partition the state does not have is malformed to Replay,
// but ReplayGrowing (a replica whose stream gained partitions it has not opened
// yet) grows the state to hold it, up to the bound it is given.
func TestReplayGrowing(t *testing.T) {
	recs := AppendRecord(nil, RecDelivered, 2, 7, 1)
	recs = AppendRecord(recs, RecNext, 0, 4)
	st := State{Parts: []PartState{{Next: 1}}}
	if n := Replay(&st, [][]byte{recs}); n != 0 || len(st.Parts) != 1 {
		t.Fatalf("Replay took a record of partition 2 on a state of 1: %d chunks, %d parts", n, len(st.Parts))
	}
	if n := ReplayGrowing(&st, [][]byte{recs}, 2); n != 0 || len(st.Parts) != 1 {
		t.Fatalf("ReplayGrowing bounded at 2 partitions took partition 2: %d chunks, %d parts", n, len(st.Parts))
	}
	if n := ReplayGrowing(&st, [][]byte{recs}, 1024); n != 1 {
		t.Fatalf("ReplayGrowing applied %d chunks, want 1", n)
	}
	want := State{Parts: []PartState{{Next: 4}, {}, {Next: 8, Pending: [][2]uint64{{7, 1}}}}}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("state after growing: %+v, want %+v", st, want)
	}
}
