package server_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
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
)

func nativeURL(s *server.Server) string { return "tern://" + s.Addr().String() }

// connectAs connects with credentials; the test fails if the server refuses.
// The wait is longer than the client's default: a bcrypt comparison under the
// race detector, after failed logins from the same address have been slowed,
// can take longer than 2 s on a busy machine.
func connectAs(t *testing.T, s *server.Server, creds string, opts ...tern.Option) *tern.Conn {
	t.Helper()
	opts = append([]tern.Option{tern.Timeout(15 * time.Second)}, opts...)
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
		c, err := tern.Connect(nativeURL(s), tern.Credentials([]byte(creds)), tern.NoReconnect(), tern.Timeout(15*time.Second))
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
	file := authtest.Users(t, `
[[users]]
name = "svc"
password = %[1]q
subscribe = { allow = ["svc.>"] }
publish = { allow = ["svc.status"] }
allow_responses = true

[[users]]
name = "client"
password = %[1]q
publish = { allow = ["svc.>"] }
subscribe = { allow = ["_INBOX.>"] }
`)
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

// accountsFile: accounts acme and beta; acme exports public.> to beta, which
// sees it under "acme."; beta takes two connections and three subscriptions at
// most. Every user's password is "pw".
func accountsFile(t *testing.T) string {
	file := authtest.Users(t, `
[[accounts]]
name = "acme"
exports = [{ subjects = "public.>", to = ["beta"] }]

[[accounts]]
name = "beta"
max_connections = 2
max_subscriptions = 3
imports = [{ account = "acme", subjects = "public.>", prefix = "acme" }]

[[users]]
name = "a"
account = "acme"
password = %[1]q

[[users]]
name = "b"
account = "beta"
password = %[1]q

[[users]]
name = "root"
password = %[1]q
`)
	return file
}

// TestAccountsIsolateSubjects: accounts share no subject but what one exports
// and another imports; the global account sees neither.
func TestAccountsIsolateSubjects(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = accountsFile(t) })
	a, b, root := connectAs(t, s, "a:pw"), connectAs(t, s, "b:pw"), connectAs(t, s, "root:pw")
	subAll := func(c *tern.Conn) *tern.Subscription {
		sub, err := c.SubscribeSync(">")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	aAll, bAll, rootAll := subAll(a), subAll(b), subAll(root)
	next := func(sub *tern.Subscription, who string) string {
		t.Helper()
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		return m.Subject
	}
	none := func(sub *tern.Subscription, who string) {
		t.Helper()
		if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
			t.Fatalf("%s got %s, want nothing", who, m.Subject)
		}
	}
	for _, p := range []struct {
		c    *tern.Conn
		subj string
	}{{a, "orders.new"}, {root, "orders.global"}, {b, "acme.public.forged"}, {a, "public.news"}} {
		if err := p.c.Publish(p.subj, []byte(p.subj)); err != nil {
			t.Fatal(err)
		}
		if err := p.c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if got := next(aAll, "acme"); got != "orders.new" {
		t.Fatalf("acme got %s first, want its own orders.new", got)
	}
	if got := next(aAll, "acme"); got != "public.news" {
		t.Fatalf("acme got %s, want public.news (beta's publish must stay in beta)", got)
	}
	if got := next(rootAll, "global"); got != "orders.global" {
		t.Fatalf("global got %s, want only its own orders.global", got)
	}
	none(rootAll, "global")
	if got := next(bAll, "beta"); got != "acme.public.forged" {
		t.Fatalf("beta got %s first, want its own acme.public.forged", got)
	}
	if got := next(bAll, "beta"); got != "acme.public.news" {
		t.Fatalf("beta got %s, want acme's public.news as acme.public.news", got)
	}
	none(bAll, "beta")

	// Request and reply inside an account; the global account cannot reach in.
	if _, err := a.Subscribe("svc.echo", func(m *tern.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	a2 := connectAs(t, s, "a:pw")
	if m, err := a2.RequestTimeout("svc.echo", []byte("hi"), 5*time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("request inside acme: %v %v", m, err)
	}
	if _, err := root.RequestTimeout("svc.echo", []byte("hi"), 300*time.Millisecond); err == nil {
		t.Fatal("the global account reached acme's service")
	}
	for _, f := range []string{"$A.>", "$A.acme.>"} {
		var we *wire.Error
		if _, err := root.SubscribeSync(f); !errors.As(err, &we) || we.Code != wire.CodePermission {
			t.Fatalf("global subscription to %s: %v, want permission denied", f, err)
		}
	}
	opt, rootErrs := errs()
	root2 := connectAs(t, s, "root:pw", opt)
	if err := root2.Publish("$A.acme.orders.new", nil); err != nil {
		t.Fatal(err)
	}
	wantPermissionError(t, rootErrs, "$A.acme.orders.new")
}

func TestAccountLimits(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = accountsFile(t) })
	b1 := connectAs(t, s, "b:pw")
	connectAs(t, s, "b:pw")
	c, err := tern.Connect(nativeURL(s), tern.Credentials([]byte("b:pw")), tern.NoReconnect())
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeMaxConnections {
		if c != nil {
			c.Close()
		}
		t.Fatalf("third connection of beta: %v, want the account's connection limit", err)
	}
	for i := range 3 {
		if _, err := b1.SubscribeSync("s." + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b1.SubscribeSync("s.3"); !errors.As(err, &we) || we.Code != wire.CodeMaxSubscriptions {
		t.Fatalf("fourth subscription of beta: %v, want the account's subscription limit", err)
	}
	// Other accounts are not bound by beta's limits.
	a := connectAs(t, s, "a:pw")
	for i := range 5 {
		if _, err := a.SubscribeSync("s." + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMQTTClientsStayOutOfAccounts: MQTT clients of the global account neither
// see an account's traffic through '#' nor publish into it by its inside name;
// an MQTT client of the account sees it under the account's own topics.
func TestMQTTClientsStayOutOfAccounts(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_sub"); err != nil {
		t.Fatal("mosquitto_sub not installed (scripts/deps.sh installs it)")
	}
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile, c.Anonymous = accountsFile(t), "loopback" })
	port := strconv.Itoa(s.MQTTAddr().(*net.TCPAddr).Port)
	a := connectAs(t, s, "a:pw")
	inbox, err := a.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	// An anonymous MQTT client subscribes to everything for 2 s, while acme
	// publishes and the MQTT client tries to publish into acme.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, "mosquitto_sub", "-h", "127.0.0.1", "-p", port, "-t", "#", "-v", "-W", "2", "-V", "mqttv311")
	var out strings.Builder
	sub.Stdout = &out
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	acmeSub := exec.CommandContext(ctx, "mosquitto_sub", "-h", "127.0.0.1", "-p", port, "-u", "a", "-P", "pw", "-t", "orders/#", "-v", "-C", "1", "-W", "10")
	var acmeOut strings.Builder
	acmeSub.Stdout = &acmeOut
	if err := acmeSub.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the subscription is in place
	if err := a.Publish("orders.secret", []byte("acme-only")); err != nil {
		t.Fatal(err)
	}
	if err := exec.CommandContext(ctx, "mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-t", "$A/acme/orders/forged", "-m", "x", "-q", "1").Run(); err != nil {
		t.Fatal(err)
	}
	if err := exec.CommandContext(ctx, "mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-t", "public/hello", "-m", "global").Run(); err != nil {
		t.Fatal(err)
	}
	_ = sub.Wait() // -W 2 ends it
	if err := acmeSub.Wait(); err != nil || strings.TrimSpace(acmeOut.String()) != "orders/secret acme-only" {
		t.Fatalf("the MQTT subscriber of acme got %q (%v), want acme's message as orders/secret", acmeOut.String(), err)
	}
	if strings.Contains(out.String(), "acme-only") || strings.Contains(out.String(), "forged") {
		t.Fatalf("the MQTT subscriber to # saw account traffic:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "public/hello global") {
		t.Fatalf("the MQTT subscriber to # missed the global message:\n%s", out.String())
	}
	if m, err := inbox.NextMsg(5 * time.Second); err != nil || string(m.Data) != "acme-only" {
		t.Fatalf("acme got %v %v, want its own message", m, err)
	}
	if m, err := inbox.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("an MQTT client published into acme: %s %q", m.Subject, m.Data)
	}
}

// TestImportedQueueGroupsStandApart: a queue group of the importing account on
// imported subjects is its own group, not one with the exporter's group of the
// same name: both get every message.
func TestImportedQueueGroupsStandApart(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = accountsFile(t) })
	a, b := connectAs(t, s, "a:pw"), connectAs(t, s, "b:pw")
	aw, err := a.QueueSubscribeSync("public.jobs", "w")
	if err != nil {
		t.Fatal(err)
	}
	bw, err := b.QueueSubscribeSync("acme.public.jobs", "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*tern.Conn{a, b} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	for i := range n {
		if err := a.Publish("public.jobs", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct {
		sub  *tern.Subscription
		who  string
		subj string
	}{{aw, "acme", "public.jobs"}, {bw, "beta", "acme.public.jobs"}} {
		for i := range n {
			m, err := q.sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("%s's group got %d of %d messages: %v", q.who, i, n, err)
			}
			if m.Subject != q.subj {
				t.Fatalf("%s got %s, want %s", q.who, m.Subject, q.subj)
			}
		}
	}
}

// TestUDPClientsOfAccounts: a native client over reliable UDP lives in its
// user's account as a TCP client does.
func TestUDPClientsOfAccounts(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile, c.UDPPort = accountsFile(t), 0 })
	udpA, err := tern.Connect("udp://"+s.UDPAddr().String(), tern.Credentials([]byte("a:pw")), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer udpA.Close()
	tcpA, root := connectAs(t, s, "a:pw"), connectAs(t, s, "root:pw")
	mine, err := tcpA.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	global, err := root.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*tern.Conn{tcpA, root} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := udpA.Publish("orders.udp", []byte("over udp")); err != nil {
		t.Fatal(err)
	}
	if err := udpA.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := mine.NextMsg(5 * time.Second); err != nil || m.Subject != "orders.udp" {
		t.Fatalf("acme over TCP got %v %v, want acme's UDP publish as orders.udp", m, err)
	}
	if m, err := global.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("the global account got acme's %s", m.Subject)
	}
}
