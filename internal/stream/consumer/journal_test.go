package consumer

import "testing"

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
