package netns

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// TestBridgePartition: Partition cuts every link between its groups both ways,
// leaves links within a group and those of a host in no group, and Heal undoes it.
// Needs root (TERN_NO_NETNS=1 skips it, as it does the other namespace tests).
func TestBridgePartition(t *testing.T) {
	if os.Getenv("TERN_NO_NETNS") == "1" {
		t.Skip("TERN_NO_NETNS=1")
	}
	b, err := NewBridge("tern-nst", 193, 5)
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, ns := range b.Hosts {
		var l net.Listener
		if err := In(ns, func() (err error) {
			l, err = net.Listen("tcp", net.JoinHostPort(b.Addrs[i], "7000"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	// reach reports, for every ordered pair of hosts, whether a TCP connection from
	// the first to the second succeeds (a cut one times out: its packets vanish).
	reach := func() [5][5]bool {
		var mu sync.Mutex
		var out [5][5]bool
		var wg sync.WaitGroup
		for i := range b.Hosts {
			for j := range b.Hosts {
				if i == j {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := In(b.Hosts[i], func() error {
						c, err := net.DialTimeout("tcp", net.JoinHostPort(b.Addrs[j], "7000"), 500*time.Millisecond)
						if err == nil {
							c.Close()
						}
						return err
					})
					mu.Lock()
					out[i][j] = err == nil
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		return out
	}
	check := func(when string, cut func(i, j int) bool) {
		t.Helper()
		got := reach()
		for i := range b.Hosts {
			for j := range b.Hosts {
				if i != j && got[i][j] == cut(i, j) {
					t.Errorf("%s: host %d → host %d reachable: %v, want %v", when, i, j, got[i][j], !cut(i, j))
				}
			}
		}
	}

	// Hosts 0 and 1 against 2 and 3; host 4 in neither, linked to all.
	group := map[int]int{0: 1, 1: 1, 2: 2, 3: 2}
	if err := b.Partition([]int{0, 1}, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	check("partitioned", func(i, j int) bool { return group[i] != 0 && group[j] != 0 && group[i] != group[j] })
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	check("healed", func(i, j int) bool { return false })

	if err := b.Partition([]int{0}, []int{0, 1}); err == nil {
		t.Error("a host in two groups was taken")
	}
	if err := b.Partition([]int{0}, []int{5}); err == nil {
		t.Error("a host the bridge does not have was taken")
	}
}
