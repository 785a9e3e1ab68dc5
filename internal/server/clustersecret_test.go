package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/cluster/secret"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv"
)

func secretFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterSecretFile: nodes given one cluster_secret_file form a cluster that
// carries messages and says it is secured; /metrics counts refused routes.
func TestClusterSecretFile(t *testing.T) {
	text, err := secret.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := secretFile(t, text+"\n", 0o600)
	nodes := servertest.StartCluster(t, 3, func(i int, c *server.Config) {
		c.ClusterSecretFile = path
		if i == 0 {
			c.HTTPAddr = "127.0.0.1:0"
		}
	})
	c1, c3 := connect(t, nodes[0]), connect(t, nodes[2])
	sub, err := c3.SubscribeSync("secured.>")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "interest at n1", 5*time.Second, func() bool { return interestAt(nodes[0], "n3") >= 1 })
	if err := c1.Publish("secured.x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("across secured nodes: %v %v", m, err)
	}
	for _, n := range nodes {
		if st := n.ClusterNode().Status(); !st.Secured || st.RouteAuthFailures != 0 {
			t.Fatalf("%s: secured %v, %d authentication failures", st.Node, st.Secured, st.RouteAuthFailures)
		}
	}
	resp, err := http.Get("http://" + nodes[0].HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "\ntern_route_auth_failures_total 0\n") {
		t.Errorf("/metrics lacks tern_route_auth_failures_total:\n%s", grepLines(string(b), "tern_route_auth"))
	}
}

// startLogged starts a server with cfg, logging to the returned buffer.
func startLogged(t *testing.T, cfg server.Config) (*server.Server, *testenv.Buffer, error) {
	t.Helper()
	logs := &testenv.Buffer{}
	s, err := server.New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		return nil, logs, err
	}
	if err := s.Start(); err != nil {
		return nil, logs, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, logs, nil
}

// TestClusterSecretFileChecks: a file that is missing or holds no usable secret
// stops the server with an error naming the option and the file (and never its
// content); one others may read is used with a warning; one given to a server
// running alone is not read.
func TestClusterSecretFileChecks(t *testing.T) {
	base := func() server.Config {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.StoreDir, cfg.UDPPort = "127.0.0.1", 0, "", "", -1
		cfg.MQTTPort, cfg.MQTTWSPort, cfg.KafkaPort = -1, -1, -1
		cfg.ServerName, cfg.ClusterPort, cfg.ClusterName = "n1", servertest.RoutePort(t), "secret-checks"
		return cfg
	}
	for name, c := range map[string]struct{ path, want string }{
		"missing":    {filepath.Join(t.TempDir(), "nope"), "no such file"},
		"short":      {secretFile(t, "c2hvcnQgc2VjcmV0\n", 0o600), "12 bytes once decoded, want at least 16"},
		"not base64": {secretFile(t, "my very secret passphrase\n", 0o600), "not padded base64"},
		"empty":      {secretFile(t, "\n", 0o600), "empty"},
	} {
		cfg := base()
		cfg.ClusterSecretFile = c.path
		_, _, err := startLogged(t, cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "cluster_secret_file: cluster secret file") ||
			!strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming the option and %s with %q", name, err, c.path, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "passphrase") {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}

	text, _ := secret.Generate()
	cfg := base()
	cfg.ClusterSecretFile = secretFile(t, text, 0o644)
	s, logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ClusterNode().Status().Secured {
		t.Fatal("not secured")
	}
	if !strings.Contains(logs.String(), "cluster secret file is readable or writable by other users") || strings.Contains(logs.String(), text) {
		t.Errorf("want a warning about the file's mode, without the secret:\n%s", logs.String())
	}

	alone := base()
	alone.ClusterPort, alone.ClusterSecretFile = -1, filepath.Join(t.TempDir(), "nope")
	if _, logs, err := startLogged(t, alone); err != nil || !strings.Contains(logs.String(), "the server runs alone") {
		t.Errorf("a server alone with a secret file: %v\n%s", err, logs.String())
	}
}

func TestClusterSecretFileFromEnvironment(t *testing.T) {
	cfg, err := server.LoadConfig(nil, func(k string) (string, bool) {
		if k == "TERN_CLUSTER_SECRET_FILE" {
			return "/etc/tern/cluster.secret", true
		}
		return "", false
	}, io.Discard)
	if err != nil || cfg.ClusterSecretFile != "/etc/tern/cluster.secret" {
		t.Fatalf("TERN_CLUSTER_SECRET_FILE: %q, %v", cfg.ClusterSecretFile, err)
	}
}
