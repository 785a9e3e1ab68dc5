package udp

// replayWindow tells a fresh datagram counter from one already accepted. UDP reorders
// and drops, so counters arrive out of order; the window remembers, as a ring of
// bits, which of the replayWindowSize counters below the highest seen have arrived
// (the sliding bitmap of IPsec and WireGuard). Anything older than the window is
// refused: a datagram delayed that long is lost to the ARQ, which resends it under a
// new counter anyway.
type replayWindow struct {
	top  uint64 // highest counter accepted + 1; 0 before the first
	bits [replayWindowSize / 64]uint64
}

const replayWindowSize = 1024

// maxCounter is the one counter Noise never uses.
const maxCounter = 1<<64 - 1

// fresh reports whether counter n may be accepted. It changes nothing: the window
// moves only for datagrams that also pass authentication (mark).
func (w *replayWindow) fresh(n uint64) bool {
	if n == maxCounter {
		return false // reserved by Noise; refusing it also keeps top from wrapping
	}
	if n >= w.top {
		return true
	}
	if w.top-n > replayWindowSize {
		return false
	}
	return w.bits[n/64%uint64(len(w.bits))]&(1<<(n%64)) == 0
}

// mark records counter n as accepted; n must be fresh.
func (w *replayWindow) mark(n uint64) {
	if n >= w.top {
		// The counters between the old top and n reuse the bits of counters that
		// now fall out of the window: they have not arrived yet.
		if n-w.top >= replayWindowSize {
			clear(w.bits[:])
		} else {
			for c := w.top; c < n; c++ {
				w.bits[c/64%uint64(len(w.bits))] &^= 1 << (c % 64)
			}
		}
		w.bits[n/64%uint64(len(w.bits))] &^= 1 << (n % 64)
		w.top = n + 1
	}
	w.bits[n/64%uint64(len(w.bits))] |= 1 << (n % 64)
}
