// Package netns makes Linux network namespaces joined by a veth pair, or several on
// a bridge (Bridge), for tests and benchmarks that need a real network path whose
// faults they control: random loss with the iptables statistic match (this kernel
// has no netem), blackouts and partitions. It needs root, `ip` and `iptables`;
// scripts/deps.sh installs iptables.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnavailable reports a machine where namespaces cannot be made.
var ErrUnavailable = errors.New("netns: unavailable")

// Available reports why namespaces cannot be made here, nil when they can.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnavailable)
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s missing (scripts/deps.sh installs it)", ErrUnavailable, tool)
		}
	}
	return nil
}

// Pair is two namespaces, A and B, with addresses AddrA and AddrB on one /24.
type Pair struct {
	A, B         string
	AddrA, AddrB string
	locks        []*os.File // held from NewPair to Close
}

// NewPair makes namespaces name-a and name-b joined by a veth pair, addressed
// 10.<subnet>.0.1 and .2. Namespaces left by an earlier run of the same name are
// removed first. It waits while another process or goroutine has a pair of the same
// name or subnet. Close removes them.
func NewPair(name string, subnet byte) (*Pair, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	// Namespaces and interfaces are machine-wide, and NewPair first removes any of
	// the same name: a concurrent user of this name or subnet (a test running in
	// parallel, a test binary of another worktree, a benchmark) would lose its pair.
	// Whoever holds the locks owns the pair and the others wait; the kernel lets go
	// of a dead holder's locks, and its leftovers are removed as before.
	locks, err := lock(name, subnet)
	if err != nil {
		return nil, err
	}
	p := &Pair{A: name + "-a", B: name + "-b",
		AddrA: fmt.Sprintf("10.%d.0.1", subnet), AddrB: fmt.Sprintf("10.%d.0.2", subnet)}
	p.removeNamespaces()
	p.locks = locks
	// Interface names are limited to 15 bytes.
	va, vb := fmt.Sprintf("tv%da", subnet), fmt.Sprintf("tv%db", subnet)
	steps := [][]string{
		{"ip", "netns", "add", p.A}, {"ip", "netns", "add", p.B},
		{"ip", "link", "add", va, "type", "veth", "peer", "name", vb},
		{"ip", "link", "set", va, "netns", p.A}, {"ip", "link", "set", vb, "netns", p.B},
	}
	for _, s := range []struct{ ns, dev, addr string }{{p.A, va, p.AddrA}, {p.B, vb, p.AddrB}} {
		steps = append(steps,
			[]string{"ip", "netns", "exec", s.ns, "ip", "addr", "add", s.addr + "/24", "dev", s.dev},
			// No segmentation offload across the pair: every packet is at most the
			// MTU, as on a real link, so loss hits each wire packet rather than a
			// 64 KB aggregate (TCP's and offloaded UDP's alike).
			[]string{"ip", "netns", "exec", s.ns, "ip", "link", "set", s.dev, "gso_max_segs", "1"},
			[]string{"ip", "netns", "exec", s.ns, "ip", "link", "set", s.dev, "up"},
			[]string{"ip", "netns", "exec", s.ns, "ip", "link", "set", "lo", "up"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close removes both namespaces (and with them the veth pair) and lets another
// process have the name.
func (p *Pair) Close() {
	p.removeNamespaces()
	unlock(p.locks)
	p.locks = nil
}

func (p *Pair) removeNamespaces() {
	_ = exec.Command("ip", "netns", "del", p.A).Run()
	_ = exec.Command("ip", "netns", "del", p.B).Run()
}

// Exec runs a command inside namespace ns.
func (p *Pair) Exec(ns string, args ...string) error {
	return run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// SetLoss drops a random share of the packets of protocol proto ("udp", "tcp", or ""
// for all) entering either namespace, replacing any earlier loss or blackout rule.
func (p *Pair) SetLoss(proto string, share float64) error {
	for _, ns := range []string{p.A, p.B} {
		if err := p.Exec(ns, "iptables", "-F", "INPUT"); err != nil {
			return err
		}
		if share <= 0 {
			continue
		}
		rule := []string{"iptables", "-A", "INPUT"}
		if proto != "" {
			rule = append(rule, "-p", proto)
		}
		rule = append(rule, "-m", "statistic", "--mode", "random", "--probability", fmt.Sprint(share), "-j", "DROP")
		if err := p.Exec(ns, rule...); err != nil {
			return err
		}
	}
	return nil
}

// Blackout drops (on) or stops dropping (off) every packet of protocol proto ("" for
// all) entering either namespace.
func (p *Pair) Blackout(proto string, on bool) error {
	op := "-D"
	if on {
		op = "-I"
	}
	for _, ns := range []string{p.A, p.B} {
		rule := []string{"iptables", op, "INPUT"}
		if proto != "" {
			rule = append(rule, "-p", proto)
		}
		if err := p.Exec(ns, append(rule, "-j", "DROP")...); err != nil {
			return err
		}
	}
	return nil
}

// In runs fn on an OS thread inside namespace ns; sockets fn opens stay in it
// whichever goroutine uses them later.
func In(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", ns, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns %s: enter: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// lock takes exclusive locks on the pair's subnet (its veth interfaces are named
// after it) and on its name, waiting while another process or goroutine holds either.
func lock(name string, subnet byte) ([]*os.File, error) {
	var held []*os.File
	// Always in this order, so that two callers never each hold what the other waits for.
	for _, key := range []string{fmt.Sprintf("subnet-%d", subnet), "name-" + name} {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "tern-netns-"+key+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			unlock(held)
			return nil, fmt.Errorf("netns: lock: %w", err)
		}
		held = append(held, f)
		for err = unix.Flock(int(f.Fd()), unix.LOCK_EX); err == unix.EINTR; {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		}
		if err != nil {
			unlock(held)
			return nil, fmt.Errorf("netns: lock %s: %w", f.Name(), err)
		}
	}
	return held, nil
}

// unlock releases locks: closing a file lets go of its flock.
func unlock(locks []*os.File) {
	for _, f := range locks {
		_ = f.Close()
	}
}
