package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// probes is what Config.Probe needs: which publisher's probes each subscriber has
// seen.
type probes struct {
	prefix string
	seen   [][]atomic.Bool // [subscriber][publisher]
}

func newProbes(subject string, subs, pubs int) *probes {
	p := &probes{prefix: subject + ".probe.", seen: make([][]atomic.Bool, subs)}
	for i := range p.seen {
		p.seen[i] = make([]atomic.Bool, pubs)
	}
	return p
}

// subject is subscriber i's probe subject.
func (p *probes) subject(i int) string { return p.prefix + strconv.Itoa(i) }

// handler records, for subscriber i, the publisher a probe came from (its index,
// little endian, in the first 4 bytes).
func (p *probes) handler(i int) func([]byte) {
	return func(data []byte) {
		if len(data) < 4 {
			return
		}
		if pub := binary.LittleEndian.Uint32(data); int(pub) < len(p.seen[i]) {
			p.seen[i][pub].Store(true)
		}
	}
}

// run makes each publisher send probes to every subscriber that has not yet seen one
// of its own, until all have, ctx ends or ProbeTimeout passes. Unanswered probes are
// repeated with a growing pause (5 ms to 100 ms) between rounds.
func (p *probes) run(ctx context.Context, pubs []Bus) error {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	errs := make([]error, len(pubs))
	var wg sync.WaitGroup
	for pi, bus := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[pi] = p.probe(ctx, pi, bus)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *probes) probe(ctx context.Context, pi int, bus Bus) error {
	var msg [4]byte
	binary.LittleEndian.PutUint32(msg[:], uint32(pi))
	pause := 5 * time.Millisecond
	for {
		missing := 0
		for si := range p.seen {
			if p.seen[si][pi].Load() {
				continue
			}
			missing++
			if err := bus.Publish(p.subject(si), msg[:]); err != nil {
				return fmt.Errorf("loadgen: publish probe: %w", err)
			}
		}
		if missing == 0 {
			return nil
		}
		if err := bus.Flush(); err != nil {
			return fmt.Errorf("loadgen: flush probe: %w", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("loadgen: %d of %d subscribers not reachable from publisher %d (probe): %w",
				p.unseen(pi), len(p.seen), pi, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

func (p *probes) unseen(pi int) int {
	n := 0
	for si := range p.seen {
		if !p.seen[si][pi].Load() {
			n++
		}
	}
	return n
}
