package s2pace

import "testing"

func TestGatePace(t *testing.T) {
	var g Gate
	attempts := 0
	for range 320 {
		if g.Try() {
			attempts++
			g.Shrank(false)
		}
	}
	// 1, 1, 2, 4, 8, 16 batches per attempt, then one in 32.
	if attempts < 10 || attempts > 16 {
		t.Fatalf("%d attempts at 320 batches that never shrink, want 10 to 16", attempts)
	}
	passed := 0
	for !g.Try() {
		passed++
		if passed > 32 {
			t.Fatal("no attempt within 32 batches")
		}
	}
	g.Shrank(true)
	for i := range 50 {
		if !g.Try() {
			t.Fatalf("batch %d after one that shrank was not tried", i)
		}
		g.Shrank(true)
	}
	if g.Misses() != 0 {
		t.Fatalf("misses %d after batches that shrank", g.Misses())
	}
}
