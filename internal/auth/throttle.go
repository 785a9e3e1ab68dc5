package auth

import (
	"sync"
	"time"
)

// throttle slows down logins from source addresses that failed recently: each
// failure doubles the pause before the next attempt is checked, up to a limit,
// and a success or forgetAfter without failures forgets the address.
type throttle struct {
	base, max time.Duration
	mu        sync.Mutex
	hosts     map[string]*failures
	now       func() time.Time
}

type failures struct {
	n    int
	last time.Time
}

const (
	forgetAfter = 10 * time.Minute
	// maxTracked bounds the addresses remembered; past it the oldest half is
	// forgotten, so a scan from many addresses cannot exhaust memory.
	maxTracked = 100_000
)

func (t *throttle) init(base, max time.Duration) {
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 5 * time.Second
	}
	t.base, t.max = base, max
	t.hosts = make(map[string]*failures)
	t.now = time.Now
}

func (t *throttle) pause(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := t.base
	for i := 1; i < n && d < t.max; i++ {
		d *= 2
	}
	return min(d, t.max)
}

// delay is how long an attempt from host waits before it is checked.
func (t *throttle) delay(host string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.hosts[host]
	if f == nil {
		return 0
	}
	if t.now().Sub(f.last) > forgetAfter {
		delete(t.hosts, host)
		return 0
	}
	return t.pause(f.n - 1)
}

// failed records a failure from host and returns the pause before it is answered.
func (t *throttle) failed(host string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	f := t.hosts[host]
	if f == nil || now.Sub(f.last) > forgetAfter {
		if len(t.hosts) >= maxTracked {
			t.forgetOldestLocked()
		}
		f = &failures{}
		t.hosts[host] = f
	}
	f.n++
	f.last = now
	return t.pause(f.n)
}

func (t *throttle) succeeded(host string) {
	t.mu.Lock()
	delete(t.hosts, host)
	t.mu.Unlock()
}

func (t *throttle) forgetOldestLocked() {
	cut := t.now().Add(-forgetAfter / 2)
	for h, f := range t.hosts {
		if f.last.Before(cut) || len(t.hosts) > maxTracked/2 {
			delete(t.hosts, h)
		}
	}
}
