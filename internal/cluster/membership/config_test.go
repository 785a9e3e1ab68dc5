package membership

import (
	"errors"
	"net"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestJoinTarget(t *testing.T) {
	for _, tc := range []struct {
		entry  string
		gossip bool
		host   string
		port   int
	}{
		{"10.0.0.1:7401", false, "10.0.0.1", 7402},
		{"10.0.0.1:7401", true, "10.0.0.1", 7401},
		{"10.0.0.1", false, "10.0.0.1", 7402},
		{"10.0.0.1", true, "10.0.0.1", 7402},
		{"tern-0.tern.default.svc:9000", false, "tern-0.tern.default.svc", 9001},
		{"tern", false, "tern", 7402},
		{"[::1]:7401", false, "::1", 7402},
		{"[::1]", false, "::1", 7402},
		{"::1", true, "::1", 7402},
		{"fe80::1", false, "fe80::1", 7402},
	} {
		host, port, err := joinTarget(tc.entry, tc.gossip)
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("joinTarget(%q, %v) = %q, %d, %v; want %q, %d", tc.entry, tc.gossip, host, port, err, tc.host, tc.port)
		}
	}
	for _, bad := range []string{"", ":7401", "host:0", "host:x", "host:65535", "[::1", "a:b:c:d"} {
		if _, _, err := joinTarget(bad, false); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("joinTarget(%q): %v", bad, err)
		}
	}
	if _, port, err := joinTarget("host:65535", true); err != nil || port != 65535 {
		t.Errorf("gossip port 65535: %d %v", port, err)
	}
}

func TestMajorVersion(t *testing.T) {
	for v, want := range map[string]int{"0.1.0-dev": 0, "1.4.2": 1, "v2.0.0-rc1": 2, "3": 3, "10.0": 10, "1+build": 1} {
		if got, err := majorVersion(v); err != nil || got != want {
			t.Errorf("majorVersion(%q) = %d, %v", v, got, err)
		}
	}
	for _, v := range []string{"", "dev", "v", ".1", "-1.0", "x1.2"} {
		if _, err := majorVersion(v); err == nil {
			t.Errorf("majorVersion(%q) accepted", v)
		}
	}
}

func TestSelfMatcher(t *testing.T) {
	local := &memberlist.Node{Addr: net.ParseIP("10.1.2.3"), Port: 7402}
	specific := selfMatcher(net.ParseIP("127.0.0.2"), 7402, local)
	any4 := selfMatcher(net.ParseIP("0.0.0.0"), 7402, local)
	nat := selfMatcher(net.ParseIP("127.0.0.1"), 5000, local)
	for _, tc := range []struct {
		name  string
		match func(net.IP, int) bool
		ip    string
		port  int
		want  bool
	}{
		{"advertised", specific, "10.1.2.3", 7402, true},
		{"bound", specific, "127.0.0.2", 7402, true},
		{"other loopback", specific, "127.0.0.1", 7402, false},
		{"other port", specific, "127.0.0.2", 7403, false},
		{"any: loopback", any4, "127.0.0.9", 7402, true},
		{"any: other port", any4, "127.0.0.1", 7401, false},
		{"any: ipv6 loopback", any4, "::1", 7402, false},
		{"any: remote", any4, "192.0.2.1", 7402, false},
		{"nat: advertised", nat, "10.1.2.3", 7402, true},
		{"nat: bound", nat, "127.0.0.1", 5000, true},
		{"nat: bound ip, advertised port", nat, "127.0.0.1", 7402, false},
	} {
		if got := tc.match(net.ParseIP(tc.ip), tc.port); got != tc.want {
			t.Errorf("%s: %s:%d is self = %v", tc.name, tc.ip, tc.port, got)
		}
	}
}
