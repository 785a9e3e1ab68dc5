package stream

import "testing"

// TestLentPlains checks the hand-over of a compressed entry's plain batch: the
// machine takes it by the entry's bytes (its own copy), and then the proposer's
// unlend reports it gone; unlent first, the machine finds nothing.
func TestLentPlains(t *testing.T) {
	var l lentPlains
	e1, e2 := []byte{entryMsgsS2, 1, 2, 3}, []byte{entryMsgsS2, 4, 5, 6}
	p1, p2 := &[]byte{entryMsgs, 'a'}, &[]byte{entryMsgs, 'b'}
	l.lend(e1, p1)
	l.lend(e2, p2)
	if got := l.take(append([]byte(nil), e2...)); got != p2 {
		t.Fatalf("take(copy of e2) = %v, want e2's plain", got)
	}
	if l.unlend(e2) {
		t.Fatal("unlend of a taken entry reported it still lent")
	}
	if !l.unlend(e1) {
		t.Fatal("unlend of an entry not applied found nothing")
	}
	if got := l.take(e1); got != nil {
		t.Fatalf("take after unlend = %v, want nil", got)
	}
	if got := l.take([]byte{entryMsgsS2, 9}); got != nil || len(l.all) != 0 {
		t.Fatalf("take of an entry never lent = %v, %d still lent", got, len(l.all))
	}
}
