// Package clustertest runs clusters of real `tern server` processes for tests: on
// loopback with free ports, or one node per network namespace of a netns.Bridge, so
// that a node can be killed with SIGKILL, frozen with SIGSTOP or cut off by iptables
// while the others carry on. Every node serves its monitoring HTTP port, and the
// helpers read /cluster from it to learn what each node believes.
//
// The tests of this directory are the cluster's failure tests (kill -9 under load, a
// five-node mesh with every client kind, partitions, a frozen node, and the nemesis,
// which mixes them all). TERN_CLUSTER_SEEDS=N runs the randomised ones N times with
// different seeds (make soak, make nemesis); TERN_NO_NETNS=1 skips those that need
// network namespaces.
package clustertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/cluster"
	"github.com/tern-mq/tern/internal/cluster/route"
	"github.com/tern-mq/tern/internal/netns"
)

// Fixed ports of a node in a namespace of its own (each has every port to itself).
const (
	nsPort      = 7400
	nsRoutePort = 7401 // gossip on 7402
	nsHTTPPort  = 7480
	nsMQTTPort  = 1883
	nsKafkaPort = 9092
)

// Options describe a cluster to start.
type Options struct {
	N int
	// UDP opens native-over-UDP on every node (on the native port's number).
	UDP bool
	// MQTT opens an MQTT listener on every node.
	MQTT bool
	// Kafka opens a Kafka API listener on every node.
	Kafka bool
	// Bridge runs node i in namespace Bridge.Hosts[i] at Bridge.Addrs[i]; nil runs
	// every node on 127.0.0.1.
	Bridge *netns.Bridge
	// Args are extra `tern server` flags for node i (may be nil).
	Args func(i int) []string
	// Apart is how many of the N nodes, the last ones, are expected to stay out of
	// the cluster (tests of refusals): they are started like the others, but Start
	// waits for the mesh of the first N-Apart only.
	Apart int
}

// Cluster is a set of running nodes.
type Cluster struct {
	t     testing.TB
	Name  string
	Nodes []*Node
}

// Node is one `tern server` process.
type Node struct {
	Name      string // n1, n2, …
	Host      string // the address it binds and advertises
	NS        string // its network namespace, "" on loopback
	Port      int    // native TCP (and UDP when on)
	RoutePort int
	HTTPPort  int
	MQTTPort  int // 0 when off
	KafkaPort int // 0 when off
	UDP       bool

	args   []string
	dir    string
	log    string
	httpc  *http.Client
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// binDir holds the built binary until RemoveBinary.
var binDir struct {
	sync.Mutex
	path string
}

// RemoveBinary deletes the binary Start built, if any; a package whose tests use
// Start calls it from TestMain after m.Run.
func RemoveBinary() {
	binDir.Lock()
	defer binDir.Unlock()
	if binDir.path != "" {
		_ = os.RemoveAll(binDir.path)
		binDir.path = ""
	}
}

// binary builds cmd/tern once per test binary, without the race detector: the
// nodes' timing should be a release build's even when the test runs with -race.
var binary = sync.OnceValues(func() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir, err := os.MkdirTemp("", "tern-cluster-bin-")
	if err != nil {
		return "", err
	}
	binDir.Lock()
	binDir.path = dir
	binDir.Unlock()
	bin := filepath.Join(dir, "tern")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tern")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Start runs opts.N nodes, every one given the same join list (all of them), and
// waits until each (but the opts.Apart last) sees all others alive with a route to
// each. Every process is
// killed when the test ends; a failed test logs the end of each node's log.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	c := &Cluster{t: t, Name: fmt.Sprintf("ct-%s-%d", name, os.Getpid())}
	var ports *portSet
	if opts.Bridge == nil {
		ports = &portSet{t: t}
		defer ports.release()
	}
	for i := 0; i < opts.N; i++ {
		n := &Node{Name: fmt.Sprintf("n%d", i+1), UDP: opts.UDP, dir: t.TempDir()}
		if opts.Bridge != nil {
			n.Host, n.NS = opts.Bridge.Addrs[i], opts.Bridge.Hosts[i]
			n.Port, n.RoutePort, n.HTTPPort = nsPort, nsRoutePort, nsHTTPPort
			if opts.MQTT {
				n.MQTTPort = nsMQTTPort
			}
			if opts.Kafka {
				n.KafkaPort = nsKafkaPort
			}
		} else {
			n.Host = "127.0.0.1"
			ports.pick(n, opts)
		}
		n.httpc = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 1}}
		c.Nodes = append(c.Nodes, n)
	}
	for i := range c.Nodes {
		c.setArgs(i, opts)
	}
	if ports != nil {
		ports.release() // the nodes bind them now
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Kill()
		}
		if t.Failed() {
			for _, n := range c.Nodes {
				t.Logf("log of %s (last lines):\n%s", n.Name, tail(n.Output(), 40))
			}
		}
	})
	began := time.Now()
	for i, n := range c.Nodes {
		for attempt := 1; ; attempt++ {
			err := n.tryStart(bin)
			if err == nil {
				break
			}
			// Between the release of its ports and its start another process may
			// have bound one (another test binary's connection, say): the node
			// starts again on ports picked anew, and joins the others, which it
			// names, with them.
			if ports == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
				t.Fatal(err)
			}
			t.Logf("%s: a port was taken, starting it on others: %v", n.Name, err)
			ports.pick(n, opts)
			ports.release()
			c.setArgs(i, opts)
		}
	}
	up := time.Since(began)
	mesh := c.WaitFor("a full mesh", 15*time.Second, func() bool { return c.MeshOf(c.Nodes[:opts.N-opts.Apart]...) })
	t.Logf("%d nodes started in %v, full mesh %v later", opts.N, up.Round(time.Millisecond), mesh.Round(time.Millisecond))
	return c
}

// setArgs makes node i's command line: its ports and the join list of every
// node's route port.
func (c *Cluster) setArgs(i int, opts Options) {
	var join []string
	for _, n := range c.Nodes {
		join = append(join, net.JoinHostPort(n.Host, strconv.Itoa(n.RoutePort)))
	}
	n := c.Nodes[i]
	udp, mqtt, kafka := "-1", "-1", "-1"
	if n.UDP {
		udp = "0"
	}
	if n.MQTTPort != 0 {
		mqtt = strconv.Itoa(n.MQTTPort)
	}
	if n.KafkaPort != 0 {
		kafka = strconv.Itoa(n.KafkaPort)
	}
	n.args = []string{"server", "--server-name", n.Name, "--host", n.Host, "--port", strconv.Itoa(n.Port),
		"--http", net.JoinHostPort(n.Host, strconv.Itoa(n.HTTPPort)), "--udp-port", udp,
		"--mqtt-port", mqtt, "--mqtt-ws-port", "-1", "--kafka-port", kafka, "--store-dir", n.dir,
		"--cluster-port", strconv.Itoa(n.RoutePort), "--join", strings.Join(join, ","),
		"--cluster-name", c.Name}
	if ip := net.ParseIP(n.Host); ip == nil || !ip.IsLoopback() {
		n.args = append(n.args, "--anonymous", "all") // clients reach nodes in network namespaces
	}
	if opts.Args != nil {
		n.args = append(n.args, opts.Args(i)...)
	}
	n.log = filepath.Join(n.dir, "server.log")
}

func (n *Node) start(t testing.TB, bin string) {
	t.Helper()
	if err := n.tryStart(bin); err != nil {
		t.Fatal(err)
	}
}

// tryStart starts the node's process and waits until it answers.
func (n *Node) tryStart(bin string) error {
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child holds its own descriptor
	var cmd *exec.Cmd
	if n.NS != "" {
		// ip netns exec execs the server in place: the pid is the server's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.NS, bin}, n.args...)...)
	} else {
		cmd = exec.Command(bin, n.args...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := n.Status(); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited at start: %s", n.Name, tail(n.Output(), 20))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start: %s", n.Name, tail(n.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts a node that was killed again, with the same arguments and data
// directory, and waits until it answers.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if n.Running() {
		t.Fatalf("%s: restart of a running node", n.Name)
	}
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	n.start(t, bin)
}

// dial connects inside the node's namespace, so that the test process itself never
// sends to a namespace's address from the machine's own network.
func (n *Node) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if n.NS == "" {
		return d.DialContext(ctx, network, addr)
	}
	var c net.Conn
	err := netns.In(n.NS, func() error {
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// In runs fn inside the node's namespace (at once on loopback): sockets it opens
// stay there.
func (n *Node) In(fn func() error) error {
	if n.NS == "" {
		return fn()
	}
	return netns.In(n.NS, fn)
}

// URL is the node's native TCP URL.
func (n *Node) URL() string { return "tern://" + net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// UDPURL is the node's native-over-UDP URL.
func (n *Node) UDPURL() string { return "udp://" + net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// Connect connects a Go client to url (a node's URL or a list), from inside the
// node's namespace if it has one. There it never reconnects: a reconnect would dial
// from whichever thread runs it, outside the namespace.
func (n *Node) Connect(t testing.TB, url string, opts ...tern.Option) *tern.Conn {
	t.Helper()
	if n.NS != "" {
		opts = append(opts, tern.NoReconnect())
	}
	var nc *tern.Conn
	if err := n.In(func() error {
		var err error
		nc, err = tern.Connect(url, opts...)
		return err
	}); err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Status reads the node's /cluster.
func (n *Node) Status() (cluster.Status, error) {
	var st cluster.Status
	resp, err := n.httpc.Get("http://" + net.JoinHostPort(n.Host, strconv.Itoa(n.HTTPPort)) + "/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return st, fmt.Errorf("/cluster: %s: %s", resp.Status, b)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// Status is what /cluster shows.
type Status = cluster.Status

// RouteTo returns st's route to peer, if it has one.
func RouteTo(st Status, peer string) (route.Info, bool) {
	for _, r := range st.Routes {
		if r.Node == peer {
			return r, true
		}
	}
	return route.Info{}, false
}

// Alive reports whether st lists peer among the members believed alive.
func Alive(st Status, peer string) bool {
	for _, m := range st.Members {
		if m.Name == peer {
			return true
		}
	}
	return false
}

// WaitMesh waits until every running node sees every other running node alive
// with a route to it.
func (c *Cluster) WaitMesh(limit time.Duration) {
	c.t.Helper()
	c.WaitFor("a full mesh", limit, func() bool {
		return c.MeshOf(c.running()...)
	})
}

// MeshOf reports whether each of nodes sees every other one alive with a route to
// it.
func (c *Cluster) MeshOf(nodes ...*Node) bool {
	for _, n := range nodes {
		st, err := n.Status()
		if err != nil {
			return false
		}
		for _, p := range nodes {
			if p == n {
				continue
			}
			if _, ok := RouteTo(st, p.Name); !ok || !Alive(st, p.Name) {
				return false
			}
		}
	}
	return true
}

func (c *Cluster) running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// WaitFor polls cond every 5 ms until it holds, failing the test after limit. It
// returns how long it took.
func (c *Cluster) WaitFor(what string, limit time.Duration, cond func() bool) time.Duration {
	c.t.Helper()
	return WaitFor(c.t, what, limit, cond)
}

// WaitFor polls cond every 5 ms until it holds, failing t after limit. It returns
// how long it took.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// Running reports whether the node's process is alive (a stopped one counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil && n.Running() {
		_ = cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() {
	n.signal(syscall.SIGKILL)
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// Stop freezes the process (SIGSTOP); Cont lets it run again.
func (n *Node) Stop() { n.signal(syscall.SIGSTOP) }

// Terminate asks the node to shut down (SIGTERM) and waits, up to 15 s, for it to
// exit; then it kills it.
func (n *Node) Terminate() {
	n.signal(syscall.SIGTERM)
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		n.Kill()
	}
}

// Hangup sends SIGHUP: the node reloads its certificates and users file.
func (n *Node) Hangup() { n.signal(syscall.SIGHUP) }

// Cont resumes a stopped process (SIGCONT).
func (n *Node) Cont() { n.signal(syscall.SIGCONT) }

// Get fetches path from the node's monitoring endpoint.
func (n *Node) Get(path string) (string, error) {
	resp, err := n.httpc.Get("http://" + net.JoinHostPort(n.Host, strconv.Itoa(n.HTTPPort)) + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", path, resp.Status)
	}
	return string(b), err
}

// Dir is the node's store_dir.
func (n *Node) Dir() string { return n.dir }

// Output is what the node has logged so far.
func (n *Node) Output() string {
	b, _ := os.ReadFile(n.log)
	return string(b)
}

func tail(s string, lines int) string {
	var all []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// portSet hands out free loopback ports, holding each open until release so that
// none is handed out twice.
type portSet struct {
	t    testing.TB
	held []io.Closer
}

func (p *portSet) hold(c io.Closer) { p.held = append(p.held, c) }

// one returns a free TCP port, free for UDP too when udp is set.
func (p *portSet) one(udp bool) int {
	p.t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !udp {
			p.hold(l)
			return port
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			l.Close()
			continue
		}
		p.hold(l)
		p.hold(u)
		return port
	}
	p.t.Fatal("no free port")
	return 0
}

// routePair returns a free TCP port whose next port (gossip, TCP and UDP) is free
// too: --join names route ports and gossip is found one above.
func (p *portSet) routePair() int {
	p.t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port >= 65535 {
			l.Close()
			continue
		}
		g, gerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		u, uerr := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		if gerr == nil && uerr == nil {
			p.hold(l)
			p.hold(g)
			p.hold(u)
			return port
		}
		l.Close()
		if gerr == nil {
			g.Close()
		}
		if uerr == nil {
			u.Close()
		}
	}
	p.t.Fatal("no free port pair")
	return 0
}

// pick gives n free ports for what opts runs.
func (p *portSet) pick(n *Node, opts Options) {
	n.Port, n.RoutePort, n.HTTPPort = p.one(opts.UDP), p.routePair(), p.one(false)
	if opts.MQTT {
		n.MQTTPort = p.one(false)
	}
	if opts.Kafka {
		n.KafkaPort = p.one(false)
	}
}

func (p *portSet) release() {
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}
