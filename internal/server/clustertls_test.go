package server_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// TestClusterTLS: nodes with cluster_tls form a cluster over TLS and carry
// messages, whether their certificate is named by the cluster_tls_* options or
// taken from the tls_* ones; a reload with a new certificate is logged and used by
// new routes only.
func TestClusterTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster CA")
	dir := t.TempDir()
	caFile := testcerts.WriteFile(t, dir, "ca.pem", ca.PEM)
	files := make([]testcerts.Pair, 3)
	for i := range files {
		name := []string{"n1", "n2", "n3"}[i]
		files[i] = testcerts.WriteLeaf(t, dir, name, ca.Node(t, name))
	}
	nodes := servertest.StartCluster(t, 3, func(i int, c *server.Config) {
		c.ClusterTLS = true
		if i == 0 { // from the listeners' options
			c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = files[i].Cert, files[i].Key, caFile
		} else {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.ClusterTLSCAFile = files[i].Cert, files[i].Key, caFile
		}
	})
	c1, c3 := connect(t, nodes[0]), connect(t, nodes[2])
	sub, err := c3.SubscribeSync("tls.>")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "interest at n1", 5*time.Second, func() bool { return interestAt(nodes[0], "n3") >= 1 })
	if err := c1.Publish("tls.x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("across nodes over TLS: %v %v", m, err)
	}
	for _, n := range nodes {
		st := n.ClusterNode().Status()
		if !st.RoutesTLS || st.Secured || st.RouteAuthFailures != 0 || len(st.Routes) != 2 {
			t.Fatalf("%s: routes tls %v, secured %v, %d failures, %d routes", st.Node, st.RoutesTLS, st.Secured, st.RouteAuthFailures, len(st.Routes))
		}
		for _, r := range st.Routes {
			if r.TLS == "" || r.PeerCertSubject != "CN="+r.Node+",O=Tern tests" {
				t.Fatalf("%s's route to %s: tls %q, peer certificate %q", st.Node, r.Node, r.TLS, r.PeerCertSubject)
			}
		}
	}

	// A certificate that does not name the node fails the reload; the one in
	// force stays.
	serial := func() string {
		for _, r := range nodes[0].ClusterNode().Status().Routes {
			if r.Node == "n3" {
				return r.PeerCertSerial
			}
		}
		return ""
	}
	before := serial()
	testcerts.WriteLeaf(t, dir, "n3", ca.Node(t, "elsewhere"))
	if err := nodes[2].Reload(); err == nil || !strings.Contains(err.Error(), "cluster_tls: tls: cert") ||
		!strings.Contains(err.Error(), `does not name node "n3"`) {
		t.Fatalf("reload of a certificate naming another node: %v", err)
	}
	n3 := ca.Node(t, "n3")
	testcerts.WriteLeaf(t, dir, "n3", n3)
	if err := nodes[2].Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := serial(); got != before {
		t.Fatalf("n1's open route to n3 shows certificate %s after the reload, want %s still", got, before)
	}
}

// TestClusterTLSChecks: cluster_tls without a certificate or a CA, a certificate
// missing a key usage or not naming the node stop the server with an error naming
// the option or the file; cluster_tls_verify_names = false lets the name go; the
// listeners' CRL applies only along with their CA.
func TestClusterTLSChecks(t *testing.T) {
	set := testcerts.New(t)
	ca := testcerts.NewCA(t, "cluster CA")
	node := testcerts.WriteLeaf(t, set.Dir, "n1", ca.Node(t, "n1"))
	other := testcerts.WriteLeaf(t, set.Dir, "n2", ca.Node(t, "n2"))
	caFile := testcerts.WriteFile(t, set.Dir, "cluster-ca.pem", ca.PEM)
	base := func() server.Config {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", "", -1
		cfg.MQTTPort, cfg.MQTTWSPort, cfg.KafkaPort = -1, -1, -1
		cfg.ServerName, cfg.ClusterPort, cfg.ClusterName = "n1", servertest.RoutePort(t), "tls-checks"
		cfg.ClusterTLS = true
		return cfg
	}
	for name, c := range map[string]struct {
		mutate func(*server.Config)
		want   string
	}{
		"no certificate": {func(*server.Config) {}, "option cluster_tls: routes over TLS need this node's certificate"},
		"no key": {func(c *server.Config) { c.ClusterTLSCertFile = node.Cert },
			"option cluster_tls_cert_file: needs cluster_tls_key_file too"},
		"no CA": {func(c *server.Config) { c.ClusterTLSCertFile, c.ClusterTLSKeyFile = node.Cert, node.Key },
			"option cluster_tls: routes over TLS need the CA"},
		"server-only certificate": {func(c *server.Config) {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.ClusterTLSCAFile = set.ServerFiles.Cert, set.ServerFiles.Key, set.CAFile
			c.ClusterTLSVerifyNames = false
		}, "lacks extended key usage clientAuth"},
		"another node's certificate": {func(c *server.Config) {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.ClusterTLSCAFile = other.Cert, other.Key, caFile
		}, `does not name node "n1" (server_name)`},
		// tls_crl_file is signed by the listeners' CA, not the cluster's: it
		// would be refused if it applied.
		"listeners' CRL with their CA": {func(c *server.Config) {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.TLSCAFile, c.TLSCRLFile = node.Cert, node.Key, caFile, set.CRLFile
		}, "not signed by a certificate of ca"},
	} {
		cfg := base()
		c.mutate(&cfg)
		_, _, err := startLogged(t, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	for name, mutate := range map[string]func(*server.Config){
		"another node's certificate, any name": func(c *server.Config) {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.ClusterTLSCAFile = other.Cert, other.Key, caFile
			c.ClusterTLSVerifyNames = false
		},
		"a CA of its own, the listeners' CRL not used": func(c *server.Config) {
			c.ClusterTLSCertFile, c.ClusterTLSKeyFile, c.ClusterTLSCAFile = node.Cert, node.Key, caFile
			c.TLSCAFile, c.TLSCRLFile = set.CAFile, set.CRLFile
		},
	} {
		cfg := base()
		mutate(&cfg)
		s, _, err := startLogged(t, cfg)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !s.ClusterNode().Status().RoutesTLS {
			t.Errorf("%s: routes not TLS", name)
		}
	}

	off := base()
	off.ClusterTLS, off.ClusterTLSCertFile = false, node.Cert
	s, logs, err := startLogged(t, off)
	if err != nil || s.ClusterNode().Status().RoutesTLS || !strings.Contains(logs.String(), "cluster_tls is off") {
		t.Errorf("cluster_tls_cert_file without cluster_tls: %v\n%s", err, logs.String())
	}
}

func TestClusterTLSFromEnvironment(t *testing.T) {
	env := map[string]string{"TERN_CLUSTER_TLS": "true", "TERN_CLUSTER_TLS_CA_FILE": "/etc/tern/cluster-ca.pem",
		"TERN_CLUSTER_TLS_VERIFY_NAMES": "false"}
	cfg, err := server.LoadConfig(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil || !cfg.ClusterTLS || cfg.ClusterTLSCAFile != "/etc/tern/cluster-ca.pem" || cfg.ClusterTLSVerifyNames {
		t.Fatalf("cluster TLS from the environment: %+v, %v", cfg, err)
	}
	if !server.DefaultConfig().ClusterTLSVerifyNames {
		t.Fatal("cluster_tls_verify_names is off by default")
	}
}
