package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Bridge is N namespaces, one per host, each with an interface eth0 on one switch:
// a bridge living in a namespace of its own, so that nothing is added to the
// machine's own network. Host i (from 0) is namespace Hosts[i] at Addrs[i], on
// 10.<subnet>.0.0/24. Faults are iptables rules in the hosts' INPUT chains, so a
// packet that is cut leaves its sender and is lost on the way, as on a real
// network: senders see silence, never an error.
type Bridge struct {
	Switch string   // the namespace holding the bridge
	Hosts  []string // host namespaces
	Addrs  []string
	locks  []*os.File // held from NewBridge to Close
}

// NewBridge makes namespaces name-sw (the switch) and name-1 … name-n joined to it,
// host i addressed 10.<subnet>.0.<i+1>. Like NewPair it waits while another process
// or goroutine holds the name or the subnet, and removes namespaces left by an
// earlier run first. Close removes them and lets the name go.
func NewBridge(name string, subnet byte, n int) (*Bridge, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if n < 1 || n > 250 {
		return nil, fmt.Errorf("netns: %d hosts on one bridge", n)
	}
	locks, err := lock(name, subnet)
	if err != nil {
		return nil, err
	}
	b := &Bridge{Switch: name + "-sw", locks: locks}
	for i := 0; i < n; i++ {
		b.Hosts = append(b.Hosts, fmt.Sprintf("%s-%d", name, i+1))
		b.Addrs = append(b.Addrs, fmt.Sprintf("10.%d.0.%d", subnet, i+1))
	}
	b.remove()
	steps := [][]string{
		{"ip", "netns", "add", b.Switch},
		{"ip", "-n", b.Switch, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", b.Switch, "link", "set", "br0", "up"},
	}
	for i, host := range b.Hosts {
		port := fmt.Sprintf("p%d", i+1)
		steps = append(steps,
			[]string{"ip", "netns", "add", host},
			// Made inside the switch's namespace with its peer put straight into the
			// host's: interface names never meet the machine's own.
			[]string{"ip", "-n", b.Switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host},
			[]string{"ip", "-n", b.Switch, "link", "set", port, "master", "br0"},
			[]string{"ip", "-n", b.Switch, "link", "set", port, "up"},
			[]string{"ip", "-n", host, "addr", "add", b.Addrs[i] + "/24", "dev", "eth0"},
			[]string{"ip", "-n", host, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", host, "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

func (b *Bridge) remove() {
	for _, ns := range append([]string{b.Switch}, b.Hosts...) {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

// Close removes every namespace of the bridge and lets its name go.
func (b *Bridge) Close() {
	b.remove()
	unlock(b.locks)
	b.locks = nil
}

// Exec runs a command inside host i's namespace.
func (b *Bridge) Exec(i int, args ...string) error {
	return run(append([]string{"ip", "netns", "exec", b.Hosts[i]}, args...)...)
}

// CutOneWay drops every packet from host from to host to; the other direction
// still flows.
func (b *Bridge) CutOneWay(from, to int) error {
	return b.Exec(to, "iptables", "-I", "INPUT", "-s", b.Addrs[from], "-j", "DROP")
}

// Cut drops every packet between hosts i and j, both ways.
func (b *Bridge) Cut(i, j int) error {
	if err := b.CutOneWay(i, j); err != nil {
		return err
	}
	return b.CutOneWay(j, i)
}

// Isolate cuts host i off from every other host, both ways. Its own processes still
// reach it at its address.
func (b *Bridge) Isolate(i int) error {
	for j := range b.Hosts {
		if j != i {
			if err := b.Cut(i, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Partition splits the network between groups of hosts: every link between two
// hosts of different groups is cut, both ways, while hosts of one group still reach
// each other. A host in no group keeps all its links, and so bridges the groups
// (Partition([]int{0}, []int{1}) is Cut(0, 1)). Partition([]int{0, 1},
// []int{2, 3, 4}) splits five hosts into a minority and a majority.
func (b *Bridge) Partition(groups ...[]int) error {
	in := map[int]int{} // host → its group
	for g, hosts := range groups {
		for _, h := range hosts {
			if h < 0 || h >= len(b.Hosts) {
				return fmt.Errorf("netns: partition: no host %d of %d", h, len(b.Hosts))
			}
			if other, ok := in[h]; ok {
				return fmt.Errorf("netns: partition: host %d in groups %d and %d", h, other, g)
			}
			in[h] = g
		}
	}
	for g, hosts := range groups {
		for _, other := range groups[g+1:] {
			for _, i := range hosts {
				for _, j := range other {
					if err := b.Cut(i, j); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Heal removes every cut.
func (b *Bridge) Heal() error {
	var errs []error
	for i := range b.Hosts {
		errs = append(errs, b.Exec(i, "iptables", "-F", "INPUT"))
	}
	return errors.Join(errs...)
}
