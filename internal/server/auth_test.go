package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/wire"
	"golang.org/x/crypto/bcrypt"
)

func nativeURL(s *server.Server) string { return "tern://" + s.Addr().String() }

// connectAs connects with credentials; the test fails if the server refuses.
func connectAs(t *testing.T, s *server.Server, creds string, opts ...tern.Option) *tern.Conn {
	t.Helper()
	opts = append(opts, tern.Credentials([]byte(creds)), tern.NoReconnect())
	c, err := tern.Connect(nativeURL(s), opts...)
	if err != nil {
		t.Fatalf("connect as %q: %v", strings.SplitN(creds, ":", 2)[0], err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNativeAuthentication(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = authtest.File(t) })
	for _, creds := range []string{"", "alice:wrong", "nobody:" + authtest.AlicePassword, "not-a-token"} {
		c, err := tern.Connect(nativeURL(s), tern.Credentials([]byte(creds)), tern.NoReconnect())
		var we *wire.Error
		if err == nil || !errors.As(err, &we) || we.Code != wire.CodeAuth {
			if c != nil {
				c.Close()
			}
			t.Errorf("credentials %q: err %v, want an authentication error", creds, err)
		}
	}
	connectAs(t, s, authtest.Alice+":"+authtest.AlicePassword)
	connectAs(t, s, authtest.BobToken)
	connectAs(t, s, authtest.Root+":"+authtest.RootPassword)
}

func TestNativeAnonymousLoopbackOnly(t *testing.T) {
	// The server listens on every interface; a loopback client may come in
	// without credentials, one on another address may not.
	s := servertest.Start(t, func(c *server.Config) { c.Host = "0.0.0.0" })
	port := s.Addr().(*net.TCPAddr).Port
	c, err := tern.Connect("tern://127.0.0.1:"+itoa(port), tern.NoReconnect())
	if err != nil {
		t.Fatalf("anonymous loopback client refused: %v", err)
	}
	c.Close()
	ip := nonLoopbackIP(t)
	_, err = tern.Connect("tern://"+net.JoinHostPort(ip, itoa(port)), tern.NoReconnect())
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeAuth || !strings.Contains(we.Text, "anonymous") {
		t.Fatalf("anonymous client from %s: %v, want an authentication error", ip, err)
	}
}

func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to connect from")
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// errs collects the asynchronous errors the server sends a connection.
func errs() (tern.Option, <-chan error) {
	ch := make(chan error, 16)
	return tern.ErrorHandler(func(_ *tern.Conn, _ *tern.Subscription, err error) {
		select {
		case ch <- err:
		default:
		}
	}), ch
}

func wantPermissionError(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodePermission || !strings.Contains(we.Text, what) {
			t.Fatalf("got %v, want permission denied for %q", err, what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no permission error for %q", what)
	}
}

func TestNativePermissions(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = authtest.File(t) })
	root := connectAs(t, s, authtest.Root+":"+authtest.RootPassword)
	opt, aliceErrs := errs()
	alice := connectAs(t, s, authtest.Alice+":"+authtest.AlicePassword, opt)

	// Subscriptions: inside the allowed patterns only.
	got, err := alice.SubscribeSync("cmd.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"orders.>", "$TERN.API.>", ">"} {
		_, err := alice.SubscribeSync(f)
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodePermission {
			t.Fatalf("alice subscribes to %q: %v, want permission denied", f, err)
		}
	}

	// Publishes: sensors.> but not sensors.secret, nothing else.
	watch, err := root.SubscribeSync("sensors.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"sensors.secret", "sensors.t1", "orders.new"} {
		if err := alice.Publish(subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	wantPermissionError(t, aliceErrs, `publish to "sensors.secret" denied`)
	wantPermissionError(t, aliceErrs, `publish to "orders.new" denied`)
	m, err := watch.NextMsg(5 * time.Second)
	if err != nil || m.Subject != "sensors.t1" {
		t.Fatalf("root got %v %v, want sensors.t1 only", m, err)
	}
	if m, err := watch.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("denied publish delivered: %s", m.Subject)
	}

	// Root's message on cmd.x reaches alice; stream management is refused her.
	if err := root.Publish("cmd.x", []byte("go")); err != nil {
		t.Fatal(err)
	}
	if m, err := got.NextMsg(5 * time.Second); err != nil || string(m.Data) != "go" {
		t.Fatalf("alice got %v %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := alice.Streams().AddStream(ctx, tern.StreamConfig{Name: "S", Subjects: []string{"sensors.>"}}); err == nil {
		t.Fatal("alice created a stream")
	}
	wantPermissionError(t, aliceErrs, `publish to "$TERN.API.STREAM.CREATE.S" denied`)
	if _, err := root.Streams().AddStream(context.Background(), tern.StreamConfig{Name: "S", Subjects: []string{"sensors.>"}}); err != nil {
		t.Fatalf("root could not create a stream: %v", err)
	}

	// Bob subscribes to everything but private.>: deliveries there are withheld,
	// and so are the server's "$" subjects.
	bob := connectAs(t, s, authtest.BobToken)
	all, err := bob.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"private.x", "$TERN.API.STREAM.INFO.S", "public.x"} {
		if err := root.Publish(subj, []byte(subj)); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := all.NextMsg(5 * time.Second); err != nil || m.Subject != "public.x" {
		t.Fatalf("bob got %v %v, want public.x first", m, err)
	}

	// Nobody, root included, may publish to the cluster's own subjects.
	opt, rootErrs := errs()
	root2 := connectAs(t, s, authtest.Root+":"+authtest.RootPassword, opt)
	if err := root2.Publish("$TERN.SYS.META.PROPOSE.n1", nil); err != nil {
		t.Fatal(err)
	}
	wantPermissionError(t, rootErrs, "$TERN.SYS.META.PROPOSE.n1")
}

func TestMonitoringRequiresAuthentication(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (scripts/deps.sh installs it)")
	}
	s := servertest.Start(t, func(c *server.Config) {
		c.UsersFile, c.HTTPAddr = authtest.File(t), "127.0.0.1:0"
	})
	base := "http://" + s.HTTPAddr().String()
	curl := func(args ...string) string {
		out, err := exec.Command("curl", append([]string{"-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v", args, err)
		}
		return string(out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{base + "/healthz"}, "200"},
		{[]string{base + "/status"}, "401"},
		{[]string{"-u", "root:wrong", base + "/status"}, "401"},
		{[]string{"-u", authtest.Root + ":" + authtest.RootPassword, base + "/status"}, "200"},
		{[]string{"-u", authtest.Alice + ":" + authtest.AlicePassword, base + "/metrics"}, "403"},
		{[]string{"-H", "Authorization: Bearer " + authtest.BobToken, base + "/connections"}, "403"},
	} {
		if got := curl(c.args...); got != c.want {
			t.Errorf("curl %v: HTTP %s, want %s", c.args, got, c.want)
		}
	}
	out, err := exec.Command("curl", "-s", "--max-time", "10", "-u", authtest.Root+":"+authtest.RootPassword, base+"/metrics").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`tern_auth_logins_total{protocol="http",result="failure"} 2`, `tern_auth_logins_total{protocol="http",result="success"} 4`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(out), authtest.RootPassword) || strings.Contains(string(out), "$2a$") {
		t.Error("a secret appears in the metrics")
	}
}

// TestUDPSessionsAuthenticate: a native client over reliable UDP presents the
// same credentials in CONNECT and gets the same permissions.
func TestUDPSessionsAuthenticate(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile, c.UDPPort = authtest.File(t), 0 })
	url := "udp://" + s.UDPAddr().String()
	if c, err := tern.Connect(url, tern.Credentials([]byte("alice:wrong")), tern.NoReconnect()); err == nil {
		c.Close()
		t.Fatal("wrong password accepted over UDP")
	}
	c, err := tern.Connect(url, tern.Credentials([]byte(authtest.Alice+":"+authtest.AlicePassword)), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.SubscribeSync("orders.>")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodePermission {
		t.Fatalf("alice subscribes to orders.> over UDP: %v, want permission denied", err)
	}
}

// TestAllowResponses: a service user without publish permission on reply
// subjects may answer each request it receives, once.
func TestAllowResponses(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := fmt.Sprintf(`
[[users]]
name = "svc"
password = %q
subscribe = { allow = ["svc.>"] }
publish = { allow = ["svc.status"] }
allow_responses = true

[[users]]
name = "client"
password = %q
publish = { allow = ["svc.>"] }
subscribe = { allow = ["_INBOX.>"] }
`, hash, hash)
	file := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(file, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = file })
	opt, svcErrs := errs()
	svc := connectAs(t, s, "svc:pw", opt)
	client := connectAs(t, s, "client:pw")
	var replies atomic.Int32
	if _, err := svc.Subscribe("svc.echo", func(m *tern.Msg) {
		replies.Add(1)
		_ = svc.Publish(m.Reply, m.Data)
		_ = svc.Publish(m.Reply, m.Data) // a second answer is refused
	}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m, err := client.RequestTimeout("svc.echo", []byte(strconv.Itoa(i)), 5*time.Second)
		if err != nil || string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("request %d: %v %v", i, m, err)
		}
	}
	wantPermissionError(t, svcErrs, "publish to")
	if err := svc.Publish("_INBOX.unasked", nil); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-svcErrs:
			if strings.Contains(err.Error(), "_INBOX.unasked") {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a publish to a reply subject nobody asked on was not refused")
		}
	}
}
