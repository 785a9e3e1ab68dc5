package streambench

import (
	"errors"
	"testing"
)

func TestSpecPolicies(t *testing.T) {
	if wq, err := (StreamSpec{}).WorkQueue(); wq || err != nil {
		t.Errorf("no retention: %v, %v", wq, err)
	}
	if wq, err := (StreamSpec{Retention: RetainWorkQueue}).WorkQueue(); !wq || err != nil {
		t.Errorf("work queue: %v, %v", wq, err)
	}
	if _, err := (StreamSpec{Retention: "interest"}).WorkQueue(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("interest retention: %v", err)
	}
	if err := (StreamSpec{Storage: "memory"}).CheckStorage(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("memory storage: %v", err)
	}
	if all, err := (ConsumerSpec{AckPolicy: AckAll}).AcksAll(); !all || err != nil {
		t.Errorf("ack all: %v, %v", all, err)
	}
	if _, err := (ConsumerSpec{AckPolicy: "none"}).AcksAll(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ack none: %v", err)
	}
}

func TestReplayGate(t *testing.T) {
	n := 0
	g := NewReplayGate(func([]byte) bool { n++; return n < 2 })
	for range 5 {
		g.Deliver(nil)
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("Done not closed after the handler returned false")
	}
	if n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
}
