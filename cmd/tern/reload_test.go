package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/wire"
)

// TestServerReloadsUsersOnSIGHUP runs `tern server` with a users file, changes
// the file and sends SIGHUP: the connection of the user removed is closed with
// ERR 7, the subscription no longer allowed is removed with ERR 6, and the log
// says so at INFO with the user and protocol, never a secret.
func TestServerReloadsUsersOnSIGHUP(t *testing.T) {
	bin := buildTern(t)
	port := freeTCPPort(t)
	url := "tern://127.0.0.1:" + strconv.Itoa(port)
	users, write := authtest.ReloadableUsers(t, `
[[users]]
name = "gone"
password = %[1]q

[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["s.>", "t.>"] }
`)
	logPath := filepath.Join(t.TempDir(), "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "server", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--users-file", users,
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

	connect := func(user string) (*tern.Conn, chan error) {
		errs := make(chan error, 8)
		c, err := tern.Connect(url, tern.Credentials([]byte(user+":"+authtest.Password)), tern.NoReconnect(),
			tern.ErrorHandler(func(_ *tern.Conn, _ *tern.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(c.Close)
		return c, errs
	}
	wantErr := func(errs chan error, code wire.Code, text string) {
		t.Helper()
		select {
		case err := <-errs:
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != code || !strings.Contains(we.Text, text) {
				t.Fatalf("got %v, want ERR %d with %q", err, code, text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no ERR %d with %q; server log:\n%s", code, text, serverLog())
		}
	}
	gone, goneErrs := connect("gone")
	sub, subErrs := connect("sub")
	if _, err := sub.SubscribeSync("s.>"); err != nil {
		t.Fatal(err)
	}
	tSub, err := sub.SubscribeSync("t.>")
	if err != nil {
		t.Fatal(err)
	}

	write(`
[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["t.>"] }
`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wantErr(goneErrs, wire.CodeAuth, "authorization revoked: user removed")
	wantErr(subErrs, wire.CodePermission, `subscription to "s.>" denied`)
	waitFor("gone's connection to close", gone.IsClosed)
	if err := sub.Publish("t.x", []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if m, err := tSub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "still here" {
		t.Fatalf("sub's t.> after the reload: %v %v", m, err)
	}
	waitFor("the log lines", func() bool {
		l := serverLog()
		return strings.Contains(l, `level=INFO msg="authorization revoked: closing the connection"`) &&
			strings.Contains(l, `protocol=native`) && strings.Contains(l, `user=gone reason="user removed"`) &&
			strings.Contains(l, "subscription removed")
	})
	if l := serverLog(); strings.Contains(l, "$2a$") || strings.Contains(l, authtest.Password+" ") {
		t.Fatalf("a secret in the log:\n%s", l)
	}
}
