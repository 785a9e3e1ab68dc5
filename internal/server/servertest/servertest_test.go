package servertest

import (
	"errors"
	"net"
	"testing"
)

// TestAddrInUse: a bind to a port a listener holds is what StartCluster retries;
// other failures are not.
func TestAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil || !addrInUse(err) {
		t.Fatalf("second listener on %s: %v, want address in use", l.Addr(), err)
	}
	if addrInUse(errors.New("cluster: secret file: permission denied")) {
		t.Fatal("another failure taken for a port in use")
	}
}

// TestStartClusterMesh: three nodes, each with a route to the others, though the
// first port found for the first and for the third node was taken before they bound
// it.
func TestStartClusterMesh(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickRoutePort = func(t testing.TB) int {
		calls++
		if calls == 1 || calls == 4 {
			return taken.Addr().(*net.TCPAddr).Port
		}
		return RoutePort(t)
	}
	defer func() { pickRoutePort = RoutePort }()
	nodes := StartCluster(t, 3, nil)
	if calls != 5 {
		t.Fatalf("%d ports picked for 3 nodes and 2 taken ones, want 5", calls)
	}
	for _, s := range nodes {
		if got := len(s.ClusterNode().Status().Routes); got != 2 {
			t.Fatalf("%s has %d routes, want 2", s.URL(), got)
		}
	}
}
