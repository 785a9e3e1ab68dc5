package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tern-mq/tern/bench/internal/clustertest"
	"github.com/tern-mq/tern/internal/loadgen"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

func TestMaskCreds(t *testing.T) {
	got := strings.Join(maskCreds([]string{"--creds", "u:secret", "--runs", "1", "-creds=v:pw:x", "--creds"}), " ")
	if want := "--creds u:*** --runs 1 -creds=v:*** --creds"; got != want {
		t.Errorf("maskCreds = %q, want %q", got, want)
	}
}

func TestMatrixRows(t *testing.T) {
	rows := matrix(1)
	keys := map[string]bool{}
	for _, r := range rows {
		if keys[r.Key] {
			t.Fatalf("duplicate row key %s", r.Key)
		}
		keys[r.Key] = true
		if r.Cfg.Msgs <= 0 || (r.Cfg.Size != 16 && r.Cfg.Size != 1024) {
			t.Fatalf("row %s: %+v", r.Key, r.Cfg)
		}
	}
	for _, k := range []string{"pub-16", "pub-1k", "pubsub1-16", "pubsub4-1k", "queue4-16", "reqrep-1k"} {
		if !keys[k] {
			t.Errorf("matrix lacks %s", k)
		}
	}
	if got := selectRows(rows, "reqrep, pub-16"); len(got) != 3 {
		t.Fatalf("selectRows: %d rows", len(got))
	}
	if got := selectRows(rows, "pub"); len(got) != 2 || got[0].Key != "pub-16" || got[1].Key != "pub-1k" {
		t.Fatalf("selectRows(pub) = %v", got)
	}
}

// TestRunAgainstTern runs a tiny matrix against an in-process Tern server (NATS left
// out) and checks the Markdown and JSON outputs.
func TestRunAgainstTern(t *testing.T) {
	s := servertest.Start(t, nil)
	path := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	args := []string{"--nats", "", "--tern", "tern://" + s.Addr().String(), "--runs", "2", "--scale", "0.002",
		"--pause", "0s", "--quiet-wait", "0", "--only", "pubsub4-16,queue4-1k,reqrep-16", "--json", path}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"| workload | size | NATS msgs/s | Tern msgs/s |", "1 pub → 4 subs", "queue group of 4", "request/reply", "Latency detail"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("a run failed:\n%s\n%s", out, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 || rep.Runs != 2 {
		t.Fatalf("%d rows, %d runs", len(rep.Rows), rep.Runs)
	}
	for _, r := range rep.Rows {
		o := r.Systems["tern"]
		if o == nil || len(o.Results) != 2 || o.MsgsPerSec.Median <= 0 {
			t.Fatalf("row %s: %+v", r.Key, o)
		}
	}
}

func TestClusterMatrixAndPlacement(t *testing.T) {
	rows := clusterMatrix(1)
	keys := map[string]bool{}
	for _, r := range rows {
		if keys[r.Key] {
			t.Fatalf("duplicate row key %s", r.Key)
		}
		keys[r.Key] = true
		if !r.Cfg.Probe || len(r.Place) == 0 || r.Cfg.Msgs <= 0 {
			t.Fatalf("row %s: %+v", r.Key, r)
		}
	}
	for _, k := range []string{"fanout-16", "fanout-1k", "queue3-16", "queue4r-1k", "reqrep-16", "paced-16"} {
		if !keys[k] {
			t.Errorf("cluster matrix lacks %s", k)
		}
	}
	if n := nodesNeeded(rows); n != 3 {
		t.Fatalf("nodesNeeded = %d, want 3", n)
	}
	if n := nodesNeeded(matrix(1)); n != 1 {
		t.Fatalf("nodesNeeded(single) = %d, want 1", n)
	}

	var got []string
	dials := make([]loadgen.Dialer, 3)
	for i := range dials {
		dials[i] = func(name string) (loadgen.Bus, error) {
			got = append(got, fmt.Sprintf("%s@%d", name, i))
			return nil, nil
		}
	}
	d := placed(dials, map[string][]int{loadgen.RolePub: {0}, loadgen.RoleSub: {1, 2}})
	for _, name := range []string{"bench-pub-0", "bench-sub-0", "bench-sub-1", "bench-sub-2", "bench-req-0", "other"} {
		if _, err := d(name); err != nil {
			t.Fatal(err)
		}
	}
	want := "bench-pub-0@0 bench-sub-0@1 bench-sub-1@2 bench-sub-2@1 bench-req-0@0 other@0"
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("placed: %s, want %s", s, want)
	}
	if _, err := placed(dials[:1], map[string][]int{loadgen.RoleSub: {2}})("bench-sub-0"); err == nil {
		t.Fatal("a connection placed beyond the nodes given: no error")
	}
}

// TestRunClusterAgainstTern runs part of the cluster matrix against an in-process
// 3-node Tern cluster.
func TestRunClusterAgainstTern(t *testing.T) {
	c := clustertest.StartTern(t, 3)
	path := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	args := []string{"--cluster", "--nats", "", "--tern", strings.Join(c.URLs(), ","), "--runs", "1", "--scale", "0.005",
		"--pause", "0s", "--quiet-wait", "0", "--only", "fanout-16,queue4r-16,reqrep-16,paced-16", "--json", path}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"3-node clusters", "fan-out", "queue group of 4", "request/reply", "latency"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") || strings.Contains(out, "failed") {
		t.Errorf("a run failed:\n%s\n%s", out, stderr.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Nodes != 3 || len(rep.Rows) != 4 {
		t.Fatalf("%d nodes, %d rows", rep.Nodes, len(rep.Rows))
	}

	// One URL per node only with --cluster; and the rows need three.
	if err := run(context.Background(), []string{"--nats", "", "--tern", strings.Join(c.URLs(), ",")}, &stdout, &stderr); err == nil {
		t.Fatal("several URLs without --cluster: no error")
	}
	if err := run(context.Background(), []string{"--cluster", "--nats", "", "--tern", c.URLs()[0]}, &stdout, &stderr); err == nil {
		t.Fatal("--cluster with one URL: no error")
	}
}

// TestRunAgainstTernTLSAndAuth runs rows over TLS as a user with permissions (what
// bench/run.sh does with TLS=1 AUTH=1): a Tern server with only a TLS native port and
// a users file, the clients verifying its certificate against the CA of --tls-ca and
// logging in with --creds.
func TestRunAgainstTernTLSAndAuth(t *testing.T) {
	certs := testcerts.New(t)
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(t.TempDir(), "users.toml")
	perms := `allow = ["loadgen.>", "_INBOX.>"], deny = ["loadgen.denied.>"]`
	if err := os.WriteFile(users, []byte(fmt.Sprintf("[[users]]\nname = \"bench\"\npassword = %q\npublish = { %s }\nsubscribe = { %s }\n",
		hash, perms, perms)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, func(c *server.Config) {
		c.Port, c.TLSPort = -1, 0
		c.TLSCertFile, c.TLSKeyFile = certs.ServerFiles.Cert, certs.ServerFiles.Key
		c.UsersFile = users
	})
	url := "tls://" + s.TLSAddr().String()
	var stdout, stderr bytes.Buffer
	args := []string{"--nats", "", "--tern", url, "--tls-ca", certs.CAFile, "--creds", "bench:pw", "--runs", "1",
		"--scale", "0.002", "--pause", "0s", "--quiet-wait", "0", "--only", "paced-16,reqrep-16"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"- TLS: every client connection over TLS", `- authentication: every client logs in as user "bench"`, "tls://"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("a run failed:\n%s\n%s", out, stderr.String())
	}
	// Without the CA the server's certificate is not trusted; without the password
	// the login is refused.
	for _, bad := range [][]string{{"--creds", "bench:pw"}, {"--tls-ca", certs.CAFile, "--creds", "bench:wrong"}, {"--tls-ca", certs.CAFile}} {
		a := append([]string{"--nats", "", "--tern", url, "--runs", "1", "--scale", "0.002", "--quiet-wait", "0", "--only", "reqrep-16"}, bad...)
		if err := run(context.Background(), a, &stdout, &stderr); err == nil {
			t.Errorf("run with %q: no error", bad)
		}
	}
}
