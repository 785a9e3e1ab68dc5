package server_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/wire"
)

// servicesFile: acme exports the service time.> to beta (one response per
// request) and feed.> (responses until 2 s pass); the global account exports
// svc.global; beta imports them under "acme." and "g.".
func servicesFile(t *testing.T) string {
	return authtest.Users(t, `
[[accounts]]
name = "acme"
exports = [
  { services = "time.>", to = ["beta"] },
  { services = "clock.>", to = ["beta"] },
  { services = "feed.>", response = "stream", response_threshold = "2s" },
]

[[accounts]]
name = "beta"
imports = [
  { account = "acme", services = "time.>", prefix = "acme" },
  { account = "acme", services = "feed.>", prefix = "acme" },
  { account = "acme", services = "clock.>", prefix = "acme" },
  { account = "global", services = "svc.global", prefix = "g" },
]

[[accounts]]
name = "global"
exports = [{ services = "svc.global" }]

[[users]]
name = "a"
account = "acme"
password = %[1]q

[[users]]
name = "b"
account = "beta"
password = %[1]q

# acme's restricted responder: it may only answer the requests it gets.
[[users]]
name = "responder"
account = "acme"
password = %[1]q
publish = { allow = ["nothing"] }
subscribe = { allow = ["clock.>"] }
allow_responses = true

[[users]]
name = "root"
password = %[1]q
`)
}

// TestServiceImports: a client of beta calls acme's service under its own
// names and gets the answer; acme's responder sees a reply subject of its own,
// never beta's; a second response to a one-response service goes nowhere; a
// streaming service answers in order; a call nobody serves gets the
// no-responders status.
func TestServiceImports(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = servicesFile(t) })
	a, b, root := connectAs(t, s, "a:pw"), connectAs(t, s, "b:pw"), connectAs(t, s, "root:pw")

	replySubjects := make(chan string, 16)
	if _, err := a.Subscribe("time.now", func(m *tern.Msg) {
		replySubjects <- m.Reply
		_ = m.Respond(append([]byte("acme time for "), m.Data...))
		_ = m.Respond([]byte("a second answer"))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Subscribe("feed.ticks", func(m *tern.Msg) {
		for i := range 3 {
			_ = m.Respond([]byte(strconv.Itoa(i)))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Subscribe("svc.global", func(m *tern.Msg) { _ = m.Respond([]byte("global")) }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*tern.Conn{a, root} {
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	for i := range 3 {
		m, err := b.RequestTimeout("acme.time.now", []byte(strconv.Itoa(i)), 5*time.Second)
		if err != nil || string(m.Data) != "acme time for "+strconv.Itoa(i) {
			t.Fatalf("call %d: %v %v", i, m, err)
		}
		if r := <-replySubjects; len(r) < 5 || r[:4] != "_R_." {
			t.Fatalf("acme's responder saw reply subject %q, want one of its own (_R_.…)", r)
		}
	}
	if m, err := b.RequestTimeout("g.svc.global", nil, 5*time.Second); err != nil || string(m.Data) != "global" {
		t.Fatalf("call to the global account's service: %v %v", m, err)
	}

	// The second answers went nowhere: beta's inbox saw one answer per call.
	inbox, err := b.SubscribeSync("answers.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PublishRequest("acme.time.now", "answers.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if m, err := inbox.NextMsg(5 * time.Second); err != nil || string(m.Data) != "acme time for x" {
		t.Fatalf("answer: %v %v", m, err)
	}
	if m, err := inbox.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("a second answer to a one-response service reached the caller: %q", m.Data)
	}

	// A streaming service: every response, in order.
	if err := b.PublishRequest("acme.feed.ticks", "answers.feed", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		m, err := inbox.NextMsg(5 * time.Second)
		if err != nil || m.Subject != "answers.feed" || string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("stream response %d: %v %v", i, m, err)
		}
	}

	// A responder that may publish nothing but answers.
	resp := connectAs(t, s, "responder:pw")
	if _, err := resp.Subscribe("clock.now", func(m *tern.Msg) { _ = m.Respond([]byte("tick")) }); err != nil {
		t.Fatal(err)
	}
	if err := resp.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := b.RequestTimeout("acme.clock.now", nil, 5*time.Second); err != nil || string(m.Data) != "tick" {
		t.Fatalf("call answered by a responder with allow_responses: %v %v", m, err)
	}

	// Nobody serves acme's time.later: no responders, at once.
	if _, err := b.RequestTimeout("acme.time.later", nil, 5*time.Second); !errors.Is(err, tern.ErrNoResponders) {
		t.Fatalf("call nobody serves: %v, want no responders", err)
	}
	// acme's own subjects are not beta's through the service: time.now is a
	// service, not a subject beta can subscribe to.
	if _, err := b.RequestTimeout("time.now", nil, 300*time.Millisecond); err == nil {
		t.Fatal("beta reached acme's service under acme's own name")
	}
}

// TestServiceImportsAcrossNodes: beta's client on one node calls acme's service
// whose responder is on the other; the response comes back to the node that
// holds the call's reply mapping.
func TestServiceImportsAcrossNodes(t *testing.T) {
	file := servicesFile(t)
	nodes := servertest.StartCluster(t, 2, func(_ int, c *server.Config) { c.UsersFile = file; c.Anonymous = "all" })
	a := connectAs(t, nodes[1], "a:pw")
	if _, err := a.Subscribe("time.now", func(m *tern.Msg) { _ = m.Respond([]byte("from n2")) }); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	b := connectAs(t, nodes[0], "b:pw")
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := b.RequestTimeout("acme.time.now", nil, time.Second)
		if err == nil {
			if string(m.Data) != "from n2" {
				t.Fatalf("answer %q", m.Data)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer across nodes: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // interest still spreading
	}
}

// TestAccountLimitsAcrossNodes: an account's connection and subscription limits
// count its clients on every node of a cluster, once the nodes' reports have
// spread; a connection that closes frees its place on every node.
func TestAccountLimitsAcrossNodes(t *testing.T) {
	file := accountsFile(t) // beta: at most 2 connections, 3 subscriptions
	nodes := servertest.StartCluster(t, 2, func(_ int, c *server.Config) { c.UsersFile = file; c.Anonymous = "all" })
	b1 := connectAs(t, nodes[0], "b:pw")
	b2 := connectAs(t, nodes[1], "b:pw")
	for i := range 2 {
		if _, err := b1.SubscribeSync("s." + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Each node learns the other's connection within a couple of seconds.
	var we *wire.Error
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tern.Connect(nativeURL(nodes[1]), tern.Credentials([]byte("b:pw")), tern.NoReconnect())
		if errors.As(err, &we) && we.Code == wire.CodeMaxConnections {
			break
		}
		if err == nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("a third connection of beta, across two nodes, was not refused: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Two subscriptions on node 1: node 2 lets beta make one more, not two.
	if _, err := b2.SubscribeSync("t.0"); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		sub, err := b2.SubscribeSync("t.1")
		if errors.As(err, &we) && we.Code == wire.CodeMaxSubscriptions {
			break
		}
		if err == nil {
			_ = sub.Unsubscribe()
		}
		if time.Now().After(deadline) {
			t.Fatalf("fourth subscription of beta across nodes: %v, want the account's subscription limit", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Closing the connection on node 1 frees a place on node 2.
	b1.Close()
	deadline = time.Now().Add(10 * time.Second)
	for {
		c, err := tern.Connect(nativeURL(nodes[1]), tern.Credentials([]byte("b:pw")), tern.NoReconnect())
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("beta's place was not freed after a connection closed on the other node: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
