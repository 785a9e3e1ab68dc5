package membership

import (
	"errors"
	"net"
	"strconv"
	"testing"

	"github.com/hashicorp/memberlist"
)

// The metadata checks stand behind memberlist's label: they refuse what a label
// does not catch (a node configured to skip label checks, another major version,
// garbage).
func TestPeersOfAnotherClusterOrVersionAreRefused(t *testing.T) {
	c := newCluster(t)
	m := c.start(c.config("a"))
	d := &delegate{m: m}
	node := func(name string, mod func(*meta)) *memberlist.Node {
		mt := meta{format: metaFormat, cluster: "test", id: "ID-" + name, route: "127.0.0.1:1", version: "1.9.0"}
		if mod != nil {
			mod(&mt)
		}
		b, err := encodeMeta(mt)
		if err != nil {
			t.Fatal(err)
		}
		return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 9, Meta: b, State: memberlist.StateAlive}
	}

	if err := d.NotifyAlive(node("ok", nil)); err != nil {
		t.Fatalf("same cluster, same major: %v", err)
	}
	for name, tc := range map[string]struct {
		n    *memberlist.Node
		want error
	}{
		"cluster":  {node("x", func(mt *meta) { mt.cluster = "other" }), errForeignCluster},
		"major":    {node("x", func(mt *meta) { mt.version = "2.0.0" }), errIncompatible},
		"version":  {node("x", func(mt *meta) { mt.version = "dev" }), errIncompatible},
		"garbage":  {&memberlist.Node{Name: "x", Meta: []byte{7}}, errBadMeta},
		"no meta":  {&memberlist.Node{Name: "x"}, errBadMeta},
		"too long": {&memberlist.Node{Name: "x", Meta: make([]byte, MaxMetaSize+1)}, errBadMeta},
	} {
		if err := d.NotifyAlive(tc.n); !errors.Is(err, tc.want) {
			t.Errorf("alive %s: %v, want %v", name, err, tc.want)
		}
		if err := d.NotifyMerge([]*memberlist.Node{node("ok", nil), tc.n}); !errors.Is(err, tc.want) {
			t.Errorf("merge %s: %v, want %v", name, err, tc.want)
		}
	}

	// A merge that would give this node's name to another live process is refused;
	// the same name at this node's own address is this node restarted, and a dead
	// entry under the name is no conflict.
	self := m.Local()
	other := node("a", nil)
	if err := d.NotifyMerge([]*memberlist.Node{other}); !errors.Is(err, errNameConflict) {
		t.Fatalf("merge with a second a: %v", err)
	}
	host, port, _ := net.SplitHostPort(self.Addr)
	restarted := node("a", nil)
	restarted.Addr = net.ParseIP(host)
	restarted.Port = uint16(mustAtoi(t, port))
	if err := d.NotifyMerge([]*memberlist.Node{restarted}); err != nil {
		t.Fatalf("merge with a's previous process: %v", err)
	}
	other.State = memberlist.StateDead
	if err := d.NotifyMerge([]*memberlist.Node{other}); err != nil {
		t.Fatalf("merge with a dead a: %v", err)
	}

	// Refusals are logged, and repeated ones only once in a while.
	if n := countLines(c.logs.String(), `msg="refusing node" n=a node=x`); n != 6 {
		t.Fatalf("%d refusal lines for 6 reasons", n)
	}
	d.NotifyAlive(node("x", func(mt *meta) { mt.cluster = "other" }))
	if n := countLines(c.logs.String(), `msg="refusing node" n=a node=x`); n != 6 {
		t.Fatalf("a repeated refusal was logged again")
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
