package streambench

import (
	"bytes"
	"testing"
)

// TestPayloadBuffers: zero bytes by default; with RandomPayloads each buffer its
// own random bytes, the same in every run.
func TestPayloadBuffers(t *testing.T) {
	zero := &runner{cfg: Config{Size: 64}}
	if b := zero.payloadBuffer(3); !bytes.Equal(b, make([]byte, 64)) {
		t.Fatalf("default payload %x", b)
	}
	random := &runner{cfg: Config{Size: 64, RandomPayloads: true}}
	a, b := random.payloadBuffer(1), random.payloadBuffer(2)
	if len(a) != 64 || bytes.Equal(a, b) || bytes.Equal(a, make([]byte, 64)) {
		t.Fatalf("random payloads %x and %x", a, b)
	}
	if again := random.payloadBuffer(1); !bytes.Equal(a, again) {
		t.Fatalf("buffer 1 differs from run to run: %x, %x", a, again)
	}
}
