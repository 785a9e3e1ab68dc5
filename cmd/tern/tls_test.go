package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/testenv"
	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// TestCLIOverTLS: pub and sub reach a tls:// server that requires client
// certificates with --tls-ca, --tls-cert and --tls-key, or with a context that
// keeps them; without a certificate the command fails.
func TestCLIOverTLS(t *testing.T) {
	cs := testcerts.New(t)
	s := servertest.Start(t, func(c *server.Config) {
		c.TLSPort, c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile, c.TLSClientAuth = 0, cs.ServerFiles.Cert, cs.ServerFiles.Key, cs.CAFile, "require"
	})
	internalSubs.Store(s, s.Broker().Count())
	tlsArgs := []string{"--server", s.TLSURL(), "--tls-ca", cs.CAFile, "--tls-cert", cs.ClientFiles.Cert, "--tls-key", cs.ClientFiles.Key}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	var wg sync.WaitGroup
	var subErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = subscribeAndPrint(ctx, append([]string{"--count", "2", "--raw", "secure.>"}, tlsArgs...), &out)
	}()
	waitSubs(t, s, 1)
	if err := runPub(ctx, append([]string{"secure.a", "one"}, tlsArgs...)); err != nil {
		t.Fatal(err)
	}
	ternOK(t, "context", "add", "secure", "--server", s.TLSURL(), "--tls-ca", cs.CAFile, "--tls-cert", cs.ClientFiles.Cert, "--tls-key", cs.ClientFiles.Key)
	if err := runPub(ctx, []string{"--context", "secure", "secure.b", "two"}); err != nil {
		t.Fatalf("pub with the context's TLS files: %v", err)
	}
	wg.Wait()
	if subErr != nil {
		t.Fatal(subErr)
	}
	if got := out.String(); got != "one\ntwo\n" {
		t.Fatalf("sub printed %q", got)
	}
	if code, _, stderr := runExit(t, "pub", "secure.c", "x", "--server", s.TLSURL(), "--tls-ca", cs.CAFile); code != 1 {
		t.Fatalf("pub without a client certificate: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runExit(t, "pub", "secure.c", "x", "--server", s.TLSURL(), "--tls-ca", cs.CAFile, "--tls-cert", cs.ClientFiles.Cert); code != 2 || !strings.Contains(stderr, "--tls-key") {
		t.Fatalf("--tls-cert without --tls-key: exit %d, %s", code, stderr)
	}
}

// buildTern builds the tern binary into a temporary directory of t.
func buildTern(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tern")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tern")
	cmd.Dir = testenv.Root(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serverSerial is the serial number of the certificate a new TLS connection to
// addr is shown.
func serverSerial(t *testing.T, addr string, cs *testcerts.Set) *big.Int {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cs.CA.ClientConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestServerReloadsTLSOnSIGHUP runs `tern server` with only a TLS native
// listener, replaces its certificate files and sends SIGHUP: new connections get
// the new certificate, the connection made before goes on, and a broken file
// later leaves the certificate in force.
func TestServerReloadsTLSOnSIGHUP(t *testing.T) {
	cs := testcerts.New(t)
	bin := buildTern(t)
	port := freeTCPPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(t.TempDir(), "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "server", "--host", "127.0.0.1", "--port", "-1", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", cs.ServerFiles.Cert, "--tls-key-file", cs.ServerFiles.Key,
		"--http", "", "--mqtt-port", "-1", "--kafka-port", "-1", "--udp-port", "-1", "--store-dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	serverLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; server log:\n%s", what, serverLog())
			}
		}
	}
	waitFor("the server to be ready", func() bool { return strings.Contains(serverLog(), "tern server ready") })

	old, err := tern.Connect("tls://"+addr, tern.TLSCAFile(cs.CAFile), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	sub, err := old.SubscribeSync("reload.>")
	if err != nil {
		t.Fatal(err)
	}
	if got := serverSerial(t, addr, cs); got.Cmp(cs.Server.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %v, want the first certificate's %v", got, cs.Server.Cert.SerialNumber)
	}

	next := cs.CA.Server(t)
	testcerts.WriteLeaf(t, cs.Dir, "server", next)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the reload", func() bool { return strings.Contains(serverLog(), "msg=reloaded") })
	if got := serverSerial(t, addr, cs); got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after SIGHUP a new connection got serial %v, want %v", got, next.Cert.SerialNumber)
	}
	// The connection made before the reload still works both ways.
	if err := old.Publish("reload.a", []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "still here" {
		t.Fatalf("old connection after reload: %v, %v", m, err)
	}

	// A broken key: the reload fails, is logged, and the certificate in force stays.
	if err := os.WriteFile(cs.ServerFiles.Key, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("the failed reload", func() bool { return strings.Contains(serverLog(), "reload failed") })
	if !strings.Contains(serverLog(), cs.ServerFiles.Key) {
		t.Fatalf("the failed reload's message does not name the key file:\n%s", serverLog())
	}
	if got := serverSerial(t, addr, cs); got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after a failed reload a new connection got serial %v, want %v", got, next.Cert.SerialNumber)
	}
}
