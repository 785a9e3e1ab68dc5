package clustertest_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster/clustertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinary()
	os.Exit(code)
}

// deathBound: a node that vanishes is declared dead within the 2 s Tern aims for
// (membership doc.go: about 1.5 s at worst for three nodes).
const deathBound = 2 * time.Second

// seeds is how many seeded rounds the randomised tests run: one in the suite,
// TERN_CLUSTER_SEEDS in make soak.
func seeds() uint64 {
	if n, err := strconv.Atoi(os.Getenv("TERN_CLUSTER_SEEDS")); err == nil && n > 0 {
		return uint64(n)
	}
	return 1
}

// skipWithoutNetns follows the suite's convention for tests that make namespaces.
func skipWithoutNetns(t *testing.T) {
	t.Helper()
	if os.Getenv("TERN_NO_NETNS") == "1" {
		t.Skip("TERN_NO_NETNS=1")
	}
}

// seqMsg is a payload carrying a sequence number and its publish time.
func seqMsg(seq uint64, buf []byte) []byte {
	buf = binary.BigEndian.AppendUint64(buf[:0], seq)
	return binary.BigEndian.AppendUint64(buf, uint64(time.Now().UnixNano()))
}

func parseSeq(b []byte) (seq uint64, sent time.Time) {
	if len(b) < 16 {
		return ^uint64(0), time.Time{}
	}
	return binary.BigEndian.Uint64(b), time.Unix(0, int64(binary.BigEndian.Uint64(b[8:])))
}

// tally counts what each named receiver got, by sequence number.
type tally struct {
	mu     sync.Mutex
	by     map[string]map[uint64]int
	at     map[string]map[uint64]time.Time // when each receiver first got each
	maxLat map[string]time.Duration
}

func newTally() *tally {
	return &tally{by: map[string]map[uint64]int{}, at: map[string]map[uint64]time.Time{}, maxLat: map[string]time.Duration{}}
}

func (t *tally) handler(name string) tern.MsgHandler {
	t.mu.Lock()
	t.by[name] = map[uint64]int{}
	t.at[name] = map[uint64]time.Time{}
	t.mu.Unlock()
	return func(m *tern.Msg) {
		seq, sent := parseSeq(m.Data)
		now := time.Now()
		t.mu.Lock()
		if t.by[name][seq]++; t.by[name][seq] == 1 {
			t.at[name][seq] = now
		}
		if lat := now.Sub(sent); lat > t.maxLat[name] {
			t.maxLat[name] = lat
		}
		t.mu.Unlock()
	}
}

// count is how many distinct sequence numbers name got.
func (t *tally) count(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.by[name])
}

// got reports how many times name got seq.
func (t *tally) got(name string, seq uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by[name][seq]
}

// when reports when name first got seq.
func (t *tally) when(name string, seq uint64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at[name][seq]
}

// dupes lists sequence numbers the receivers in names got more than once between
// them.
func (t *tally) dupes(names ...string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := map[uint64]int{}
	for _, n := range names {
		for seq, k := range t.by[n] {
			all[seq] += k
		}
	}
	var out []string
	for seq, k := range all {
		if k > 1 && len(out) < 10 {
			out = append(out, fmt.Sprintf("%d×%d", seq, k))
		}
	}
	return out
}

// interestFrom is how many interest entries node holds from peer, -1 without a
// route to it.
func interestFrom(n *clustertest.Node, peer string) int {
	st, err := n.Status()
	if err != nil {
		return -1
	}
	r, ok := clustertest.RouteTo(st, peer)
	if !ok {
		return -1
	}
	return r.Interest
}

// noRoute reports whether node is known to have no route to peer (false when it
// cannot say).
func noRoute(n *clustertest.Node, peer string) bool {
	st, err := n.Status()
	if err != nil {
		return false
	}
	_, ok := clustertest.RouteTo(st, peer)
	return !ok
}

// hasRoute reports whether node is known to have a route to peer.
func hasRoute(n *clustertest.Node, peer string) bool {
	st, err := n.Status()
	if err != nil {
		return false
	}
	_, ok := clustertest.RouteTo(st, peer)
	return ok
}

// notAlive reports whether node is known not to believe peer alive (false when it
// cannot say).
func notAlive(n *clustertest.Node, peer string) bool {
	st, err := n.Status()
	return err == nil && !clustertest.Alive(st, peer)
}

// watch polls cond every 2 ms from now on and returns a function that reports when
// it first held (zero while it has not). stop ends the polling.
func watch(cond func() bool) (when func() time.Time, stop func()) {
	var mu sync.Mutex
	var at time.Time
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if cond() {
				mu.Lock()
				at = time.Now()
				mu.Unlock()
				return
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return at
		}, func() {
			once.Do(func() { close(done) })
			<-finished
		}
}

// since formats how long after from at was, "never" for a zero at.
func since(at, from time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}
