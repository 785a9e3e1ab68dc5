package server_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/wire"
)

// reloadUsersBefore and reloadUsersAfter are the users file of the reload tests
// before and after the reload: gone is removed, rekeyed's password changes, pub
// may publish elsewhere, sub loses s.> and has t.secret withheld, wide may
// subscribe to more, same does not change; acme's user acme-a loses x.> and
// acme-b is removed, within the account's limits of 2 connections and 2
// subscriptions.
const reloadUsersBefore = `
[[accounts]]
name = "acme"
max_connections = 2
max_subscriptions = 2

[[users]]
name = "root"
password = %[1]q
monitor = true

[[users]]
name = "gone"
password = %[1]q

[[users]]
name = "rekeyed"
password = %[1]q

[[users]]
name = "pub"
password = %[1]q
publish = { allow = ["a.>"] }

[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["s.>", "t.>"] }

[[users]]
name = "wide"
password = %[1]q
subscribe = { allow = ["w.one"] }

[[users]]
name = "same"
password = %[1]q
subscribe = { allow = ["u.>"] }

[[users]]
name = "acme-a"
account = "acme"
password = %[1]q
subscribe = { allow = ["x.>", "y.>", "z.>"] }

[[users]]
name = "acme-b"
account = "acme"
password = %[1]q
`

func reloadUsersAfter(t *testing.T) string {
	other, err := bcrypt.GenerateFromPassword([]byte("another-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return `
[[accounts]]
name = "acme"
max_connections = 2
max_subscriptions = 2

[[users]]
name = "root"
password = %[1]q
monitor = true

[[users]]
name = "rekeyed"
password = "` + string(other) + `"

[[users]]
name = "pub"
password = %[1]q
publish = { allow = ["b.>"] }

[[users]]
name = "sub"
password = %[1]q
subscribe = { allow = ["t.>"], deny = ["t.secret"] }

[[users]]
name = "wide"
password = %[1]q
subscribe = { allow = ["w.>"] }

[[users]]
name = "same"
password = %[1]q
subscribe = { allow = ["u.>"] }

[[users]]
name = "acme-a"
account = "acme"
password = %[1]q
subscribe = { allow = ["y.>", "z.>"] }

[[users]]
name = "acme-c"
account = "acme"
password = %[1]q
`
}

// client is a native connection whose asynchronous errors and close are kept.
type client struct {
	*tern.Conn
	errs   chan error
	closed chan struct{}
}

func dialUser(t *testing.T, url, user string) *client {
	t.Helper()
	c := &client{errs: make(chan error, 16), closed: make(chan struct{})}
	nc, err := tern.Connect(url, tern.Credentials([]byte(user+":"+authtest.Password)), tern.NoReconnect(),
		tern.ErrorHandler(func(_ *tern.Conn, _ *tern.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
		tern.ClosedHandler(func(*tern.Conn) { close(c.closed) }))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	return c
}

// wantErr waits for an asynchronous error of code whose text holds what.
func (c *client) wantErr(t *testing.T, code wire.Code, what string) {
	t.Helper()
	select {
	case err := <-c.errs:
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != code || !strings.Contains(we.Text, what) {
			t.Fatalf("got %v, want ERR %d with %q", err, code, what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no ERR %d with %q", code, what)
	}
}

// noErr checks that no asynchronous error came.
func (c *client) noErr(t *testing.T, who string) {
	t.Helper()
	select {
	case err := <-c.errs:
		t.Fatalf("%s got %v", who, err)
	default:
	}
}

func (c *client) wantClosed(t *testing.T, who string) {
	t.Helper()
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still connected", who)
	}
}

func subscribe(t *testing.T, c *client, subj string) *tern.Subscription {
	t.Helper()
	sub, err := c.SubscribeSync(subj)
	if err != nil {
		t.Fatalf("subscribe to %s: %v", subj, err)
	}
	return sub
}

func wantMsg(t *testing.T, sub *tern.Subscription, subj string) {
	t.Helper()
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Subject != subj {
		t.Fatalf("got %v %v, want a message on %s", m, err, subj)
	}
}

func wantNoMsg(t *testing.T, sub *tern.Subscription, what string) {
	t.Helper()
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("%s: got a message on %s", what, m.Subject)
	}
}

// TestNativeReloadUsers: a reload of the users file reaches native clients
// already connected, over TCP and over reliable UDP: removed users and users
// whose password changed are closed with ERR 7, publishes and subscriptions
// follow the new permissions at once (a subscription no longer allowed is
// removed and reported with ERR 6), wider rights are usable without
// reconnecting, an unchanged user is untouched, and the account's counts of
// connections and subscriptions follow.
func TestNativeReloadUsers(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		t.Run(transport, func(t *testing.T) {
			users, write := authtest.ReloadableUsers(t, reloadUsersBefore)
			s := servertest.Start(t, func(c *server.Config) {
				c.UsersFile, c.HTTPAddr = users, "127.0.0.1:0"
				if transport == "udp" {
					c.UDPPort = 0
				}
			})
			url := nativeURL(s)
			if transport == "udp" {
				url = "udp://" + s.UDPAddr().String()
			}
			root := dialUser(t, url, "root")
			gone, rekeyed := dialUser(t, url, "gone"), dialUser(t, url, "rekeyed")
			pub, sub, wide, same := dialUser(t, url, "pub"), dialUser(t, url, "sub"), dialUser(t, url, "wide"), dialUser(t, url, "same")
			acmeA, acmeB := dialUser(t, url, "acme-a"), dialUser(t, url, "acme-b")

			sSub, tSub := subscribe(t, sub, "s.>"), subscribe(t, sub, "t.>")
			uSub := subscribe(t, same, "u.>")
			subscribe(t, wide, "w.one")
			subscribe(t, acmeA, "x.>")
			subscribe(t, acmeA, "y.>")
			if _, err := acmeA.SubscribeSync("z.>"); err == nil {
				t.Fatal("acme's third subscription accepted")
			}
			watchA, watchB := subscribe(t, root, "a.>"), subscribe(t, root, "b.>")
			if err := root.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := pub.Publish("a.x", nil); err != nil {
				t.Fatal(err)
			}
			wantMsg(t, watchA, "a.x")
			for _, subj := range []string{"s.x", "t.x", "u.x"} {
				if err := root.Publish(subj, nil); err != nil {
					t.Fatal(err)
				}
			}
			wantMsg(t, sSub, "s.x")
			wantMsg(t, tSub, "t.x")
			wantMsg(t, uSub, "u.x")

			write(reloadUsersAfter(t))
			if err := s.Reload(); err != nil {
				t.Fatal(err)
			}

			// (a) Removed, or the password changed: closed with ERR 7.
			gone.wantErr(t, wire.CodeAuth, "authorization revoked: user removed")
			gone.wantClosed(t, "gone")
			rekeyed.wantErr(t, wire.CodeAuth, "authorization revoked: password changed")
			rekeyed.wantClosed(t, "rekeyed")
			acmeB.wantErr(t, wire.CodeAuth, "authorization revoked: user removed")
			acmeB.wantClosed(t, "acme-b")

			// (b) Publish permissions: the next publish is decided by the new ones.
			if err := pub.Publish("a.y", nil); err != nil {
				t.Fatal(err)
			}
			pub.wantErr(t, wire.CodePermission, `publish to "a.y" denied`)
			if err := pub.Publish("b.y", nil); err != nil {
				t.Fatal(err)
			}
			wantMsg(t, watchB, "b.y")
			wantNoMsg(t, watchA, "a.y after the reload")

			// (c) A subscription no longer allowed is removed and reported; the
			// one that stays has the newly denied subject withheld.
			sub.wantErr(t, wire.CodePermission, `subscription to "s.>" denied: permissions changed, subscription 1 removed`)
			for _, subj := range []string{"s.y", "t.secret", "t.y"} {
				if err := root.Publish(subj, nil); err != nil {
					t.Fatal(err)
				}
			}
			wantMsg(t, tSub, "t.y")
			wantNoMsg(t, sSub, "the removed subscription")
			wantNoMsg(t, tSub, "t.> after t.secret was denied")

			// (d) Wider rights, without reconnecting.
			two := subscribe(t, wide, "w.two")
			if err := root.Publish("w.two", nil); err != nil {
				t.Fatal(err)
			}
			wantMsg(t, two, "w.two")

			// (e) Unchanged: connected, its subscription delivers, no error.
			if err := root.Publish("u.y", nil); err != nil {
				t.Fatal(err)
			}
			wantMsg(t, uSub, "u.y")
			if !same.IsConnected() || !root.IsConnected() {
				t.Fatal("an unchanged user's connection closed")
			}
			same.noErr(t, "same")
			wide.noErr(t, "wide")

			// The account's counts: x.> and acme-b's connection were given back.
			subscribe(t, acmeA, "z.>")
			if _, err := acmeA.SubscribeSync("y.more"); err == nil {
				t.Fatal("acme's third subscription accepted after the reload")
			}
			acmeC := dialUser(t, url, "acme-c")
			if _, err := tern.Connect(url, tern.Credentials([]byte("acme-c:"+authtest.Password)), tern.NoReconnect()); err == nil {
				t.Fatal("acme's third connection accepted")
			}
			acmeC.Close()

			req, err := http.NewRequest("GET", "http://"+s.HTTPAddr().String()+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.SetBasicAuth("root", authtest.Password)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			protocol := "native"
			if transport == "udp" {
				protocol = "udp"
			}
			if want := `tern_auth_revoked_total{protocol="` + protocol + `"} 3`; !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s", want)
			}
		})
	}
}

// TestNativeReloadFailureKeepsRights: a users file that does not parse changes
// nothing for the connections already open.
func TestNativeReloadFailureKeepsRights(t *testing.T) {
	users, write := authtest.ReloadableUsers(t, reloadUsersBefore)
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = users })
	sub := dialUser(t, nativeURL(s), "sub")
	sSub := subscribe(t, sub, "s.>")
	write("[[users]]\nname = \"sub\"\npassword = \"plain\"\n")
	if err := s.Reload(); err == nil {
		t.Fatal("a bad users file reloaded")
	}
	root := dialUser(t, nativeURL(s), "root")
	if err := root.Publish("s.x", nil); err != nil {
		t.Fatal(err)
	}
	wantMsg(t, sSub, "s.x")
	sub.noErr(t, "sub")
}

// TestNativeReloadWhileSubscribing: clients connect and subscribe while the
// users file is reloaded again and again; once the last reload is in force, no
// subscription it denies delivers, whenever it was made.
func TestNativeReloadWhileSubscribing(t *testing.T) {
	const wide, narrow = `
[[users]]
name = "root"
password = %[1]q

[[users]]
name = "u"
password = %[1]q
subscribe = { allow = ["p.>", "q.>"] }
`, `
[[users]]
name = "root"
password = %[1]q

[[users]]
name = "u"
password = %[1]q
subscribe = { allow = ["q.>"] }
`
	users, write := authtest.ReloadableUsers(t, wide)
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = users })
	url := nativeURL(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 40 {
			if i%2 == 0 {
				write(narrow)
			} else {
				write(wide)
			}
			if err := s.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
		write(narrow)
		if err := s.Reload(); err != nil {
			t.Error(err)
		}
	}()
	type held struct{ p, q *tern.Subscription }
	var subs []held
	for range 20 {
		c := dialUser(t, url, "u")
		var h held
		h.p, _ = c.SubscribeSync("p.>") // allowed or not, as the file in force says
		h.q = subscribe(t, c, "q.>")
		subs = append(subs, h)
	}
	<-done
	root := dialUser(t, url, "root")
	if err := root.Publish("p.x", nil); err != nil {
		t.Fatal(err)
	}
	if err := root.Publish("q.x", nil); err != nil {
		t.Fatal(err)
	}
	for _, h := range subs {
		wantMsg(t, h.q, "q.x")
		if h.p != nil {
			if m, err := h.p.NextMsg(50 * time.Millisecond); err == nil {
				t.Fatalf("a subscription the users file denies delivered %s", m.Subject)
			}
		}
	}
}
