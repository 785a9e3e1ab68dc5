package server_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
	"github.com/tern-mq/tern/internal/streamapi"
)

// streamAccountsFile: accounts acme (streams of at most 1 MiB in all, at most
// three of them) and beta (no limits on streams), users "a" and "a-limited" (may
// publish only to orders.> and $TERN.API.STREAM.INFO.>, with replies) of acme,
// "b" of beta and "root" of the global account. Every password is "pw".
func streamAccountsFile(t *testing.T) string {
	t.Helper()
	file := authtest.Users(t, `
[[accounts]]
name = "acme"
max_storage = "1MiB"
max_streams = 3

[[accounts]]
name = "beta"

[[users]]
name = "a"
account = "acme"
password = %[1]q

[[users]]
name = "a-limited"
account = "acme"
password = %[1]q
publish = { allow = ["orders.>", "$TERN.API.STREAM.INFO.>"] }
subscribe = { allow = ["_INBOX.>"] }

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

// tenant is one account's client in the tests of accounts' streams.
type tenant struct {
	who string // the payload its publishes carry
	c   *tern.Conn
	js  *tern.Streams
}

func tenants(t *testing.T, s *server.Server) []tenant {
	var out []tenant
	for _, who := range []string{"a", "b", "root"} {
		c := connectAs(t, s, who+":pw")
		out = append(out, tenant{who: who, c: c, js: c.Streams()})
	}
	return out
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAccountStreams: two accounts and the global one each make a stream named
// ORDERS capturing orders.>, publish to it, read it back through pull and push
// consumers with acks, and see nothing of the others'.
func TestAccountStreams(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = streamAccountsFile(t) })
	ctx := bounded(t)
	ts := tenants(t, s)
	for _, tn := range ts {
		info, err := tn.js.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxBytes: 64 << 10})
		if err != nil {
			t.Fatalf("%s: create ORDERS: %v", tn.who, err)
		}
		if info.Config.Name != "ORDERS" || !slices.Equal(info.Config.Subjects, []string{"orders.>"}) {
			t.Fatalf("%s: created %+v", tn.who, info.Config)
		}
	}
	for _, tn := range ts {
		for i := range 2 {
			ack, err := tn.js.Publish(ctx, "orders.new", []byte(tn.who))
			if err != nil {
				t.Fatalf("%s: publish: %v", tn.who, err)
			}
			if ack.Stream != "ORDERS" || ack.Seq != uint64(i+1) {
				t.Fatalf("%s: publish ack %+v, want ORDERS seq %d", tn.who, ack, i+1)
			}
		}
	}
	for _, tn := range ts {
		list, err := tn.js.ListStreams(ctx)
		if err != nil {
			t.Fatalf("%s: list: %v", tn.who, err)
		}
		if len(list) != 1 || list[0].Config.Name != "ORDERS" || list[0].State.Msgs != 2 {
			t.Fatalf("%s: list %+v, want its ORDERS alone with 2 messages", tn.who, list)
		}
		info, err := tn.js.StreamInfo(ctx, "ORDERS")
		if err != nil || info.State.Msgs != 2 || !slices.Equal(info.Config.Subjects, []string{"orders.>"}) {
			t.Fatalf("%s: info %+v, %v", tn.who, info, err)
		}
		m, err := tn.js.GetMsg(ctx, "ORDERS", 0, 1)
		if err != nil || m.Subject != "orders.new" || string(m.Data) != tn.who {
			t.Fatalf("%s: stored message %+v, %v: want its own on orders.new", tn.who, m, err)
		}

		// A pull consumer with a filter, acks and redelivery of the unacked.
		if _, err := tn.js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "pull", FilterSubject: "orders.>",
			AckWait: tern.Duration(time.Second)}); err != nil {
			t.Fatalf("%s: pull consumer: %v", tn.who, err)
		}
		p := tn.js.Pull("ORDERS", "pull")
		msgs, err := p.Fetch(ctx, 2)
		if err != nil || len(msgs) != 2 {
			t.Fatalf("%s: fetch: %d messages, %v", tn.who, len(msgs), err)
		}
		for _, m := range msgs {
			if m.Subject != "orders.new" || string(m.Data) != tn.who {
				t.Fatalf("%s: pulled %s %q", tn.who, m.Subject, m.Data)
			}
			if !strings.HasPrefix(m.Reply, streamapi.AckPrefix+"ORDERS.pull.") {
				t.Fatalf("%s: ack subject %q", tn.who, m.Reply)
			}
		}
		if err := msgs[0].AckSync(ctx); err != nil {
			t.Fatalf("%s: ack: %v", tn.who, err)
		}
		again, err := p.Fetch(ctx, 1, tern.FetchMaxWait(3*time.Second))
		if err != nil || len(again) != 1 {
			t.Fatalf("%s: after one ack, fetch: %d messages, %v; want the unacknowledged one again", tn.who, len(again), err)
		}
		if md, err := again[0].Metadata(); err != nil || md.StreamSeq != 2 || md.Deliveries != 2 {
			t.Fatalf("%s: redelivered %+v, %v", tn.who, md, err)
		}
		if err := again[0].AckSync(ctx); err != nil {
			t.Fatal(err)
		}
		ci, err := tn.js.ConsumerInfo(ctx, "ORDERS", "pull")
		if err != nil || ci.Stream != "ORDERS" || ci.NumAckPending != 0 || ci.NumPending != 0 || ci.Config.FilterSubject != "orders.>" {
			t.Fatalf("%s: consumer info %+v, %v", tn.who, ci, err)
		}
		_ = p.Close()

		// A push consumer on a deliver subject of the account's own.
		sub, err := tn.c.SubscribeSync("deliver.orders")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tn.js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "push", DeliverSubject: "deliver.orders"}); err != nil {
			t.Fatalf("%s: push consumer: %v", tn.who, err)
		}
		for range 2 {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("%s: push: %v", tn.who, err)
			}
			if m.Subject != "orders.new" || string(m.Data) != tn.who {
				t.Fatalf("%s: pushed %s %q", tn.who, m.Subject, m.Data)
			}
			if err := m.AckSync(ctx); err != nil {
				t.Fatalf("%s: ack of a push: %v", tn.who, err)
			}
		}
		if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Fatalf("%s: pushed %s %q, want only its own two", tn.who, m.Subject, m.Data)
		}
		cs, err := tn.js.ListConsumers(ctx, "ORDERS")
		if err != nil || len(cs) != 2 || cs[1].Name != "push" || cs[1].Config.DeliverSubject != "deliver.orders" {
			t.Fatalf("%s: consumers %+v, %v", tn.who, cs, err)
		}
		if cs[1].NumAckPending != 0 {
			t.Fatalf("%s: push consumer has %d unacknowledged", tn.who, cs[1].NumAckPending)
		}
	}
	// Deleting one account's stream leaves the others'.
	if err := ts[0].js.DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts[0].js.StreamInfo(ctx, "ORDERS"); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("acme's ORDERS after delete: %v", err)
	}
	for _, tn := range ts[1:] {
		if info, err := tn.js.StreamInfo(ctx, "ORDERS"); err != nil || info.State.Msgs != 2 {
			t.Fatalf("%s's ORDERS after acme deleted its own: %+v, %v", tn.who, info, err)
		}
	}
}

// TestAccountStreamsApart: an account reaches no other account's stream by any
// name, not even through the global account's API subjects in its own space,
// and the global account's streams do not capture accounts' subjects.
func TestAccountStreamsApart(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = streamAccountsFile(t) })
	ctx := bounded(t)
	ts := tenants(t, s)
	a, b, root := ts[0], ts[1], ts[2]
	if _, err := b.js.AddStream(ctx, tern.StreamConfig{Name: "SECRET", Subjects: []string{"secret.>"}}); err != nil {
		t.Fatal(err)
	}
	// A global stream that captures everything a wildcard reaches.
	if _, err := root.js.AddStream(ctx, tern.StreamConfig{Name: "ALL", Subjects: []string{">"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.Publish(ctx, "secret.x", []byte("beta's")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"SECRET", "$A.beta.SECRET", "ALL"} {
		if _, err := a.js.StreamInfo(ctx, name); err == nil {
			t.Fatalf("acme reached stream %q", name)
		}
	}
	if _, err := root.js.StreamInfo(ctx, "SECRET"); !errors.Is(err, tern.ErrStreamNotFound) {
		t.Fatalf("the global account reached beta's SECRET: %v", err)
	}
	info, err := root.js.StreamInfo(ctx, "ALL")
	if err != nil {
		t.Fatal(err)
	}
	// ALL keeps the global account's own traffic (API answers to root's inbox),
	// nothing of beta's.
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := root.js.GetMsg(ctx, "ALL", 0, seq)
		if err != nil {
			continue
		}
		if strings.HasPrefix(m.Subject, "$") || string(m.Data) == "beta's" {
			t.Fatalf("the global stream ALL captured %s %q", m.Subject, m.Data)
		}
	}
	// Stream subjects and consumer subjects may not name accounts' spaces.
	if _, err := root.js.AddStream(ctx, tern.StreamConfig{Name: "SPY", Subjects: []string{"$A.beta.>"}}); err == nil {
		t.Fatal("a global stream captured beta's subjects by their inside names")
	}
	if _, err := root.js.AddConsumer(ctx, "ALL", tern.ConsumerConfig{Durable: "leak", DeliverSubject: "$A.beta.in"}); err == nil {
		t.Fatal("a global consumer delivered into beta's subjects")
	}
	// The cluster's API is the global account's.
	if r, err := a.c.RequestTimeout(streamapi.ClusterEvictSubject("n2"), nil, 2*time.Second); err != nil || !strings.Contains(string(r.Data), `"error"`) {
		t.Fatalf("acme's cluster request: %v, want a refusal", err)
	}
}

// TestAccountStreamPermissions: a user's permissions apply to the stream API in
// its account's own names.
func TestAccountStreamPermissions(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = streamAccountsFile(t) })
	ctx := bounded(t)
	a := connectAs(t, s, "a:pw").Streams()
	if _, err := a.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxBytes: 1 << 10}); err != nil {
		t.Fatal(err)
	}
	limited := connectAs(t, s, "a-limited:pw").Streams(tern.APITimeout(500 * time.Millisecond))
	if info, err := limited.StreamInfo(ctx, "ORDERS"); err != nil || info.Config.Name != "ORDERS" {
		t.Fatalf("info allowed by $TERN.API.STREAM.INFO.>: %+v, %v", info, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := limited.DeleteStream(short, "ORDERS"); err == nil {
		t.Fatal("a user without $TERN.API.STREAM.DELETE deleted a stream")
	}
	if _, err := a.StreamInfo(ctx, "ORDERS"); err != nil {
		t.Fatalf("ORDERS after a refused delete: %v", err)
	}
}

// TestAccountStorageLimit: an account's max_storage bounds the sum of its
// streams' max_bytes, every stream of it must set max_bytes, and max_streams
// bounds their number; other accounts are not bound.
func TestAccountStorageLimit(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = streamAccountsFile(t) })
	ctx := bounded(t)
	a := connectAs(t, s, "a:pw").Streams()
	limits := func(err error, what string) {
		t.Helper()
		var ae *tern.APIError
		if !errors.As(err, &ae) || ae.Code != streamapi.CodeLimits {
			t.Fatalf("%s: %v, want a refusal for the account's limits", what, err)
		}
	}
	_, err := a.AddStream(ctx, tern.StreamConfig{Name: "NOLIMIT", Subjects: []string{"n.>"}})
	limits(err, "a stream without max_bytes")
	if _, err := a.AddStream(ctx, tern.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, MaxBytes: 768 << 10}); err != nil {
		t.Fatal(err)
	}
	_, err = a.AddStream(ctx, tern.StreamConfig{Name: "MORE", Subjects: []string{"more.>"}, MaxBytes: 512 << 10})
	limits(err, "a stream past max_storage")
	if _, err := a.AddStream(ctx, tern.StreamConfig{Name: "MORE", Subjects: []string{"more.>"}, MaxBytes: 256 << 10}); err != nil {
		t.Fatalf("a stream within what is left: %v", err)
	}
	_, err = a.UpdateStream(ctx, tern.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, MaxBytes: 1 << 20})
	limits(err, "an update past max_storage")
	if _, err := a.UpdateStream(ctx, tern.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, MaxBytes: 512 << 10}); err != nil {
		t.Fatalf("an update within max_storage: %v", err)
	}
	if _, err := a.AddStream(ctx, tern.StreamConfig{Name: "THIRD", Subjects: []string{"third"}, MaxBytes: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = a.AddStream(ctx, tern.StreamConfig{Name: "FOURTH", Subjects: []string{"fourth"}, MaxBytes: 1})
	limits(err, "a stream past max_streams")
	// beta has no limits: neither max_bytes nor a count.
	b := connectAs(t, s, "b:pw").Streams()
	for _, name := range []string{"B1", "B2", "B3", "B4"} {
		if _, err := b.AddStream(ctx, tern.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name)}}); err != nil {
			t.Fatalf("beta: %v", err)
		}
	}
}

// TestAccountStreamsRestart: after a restart on the same store_dir, each
// account finds its own streams, messages and consumers again, and the global
// account's stream keeps its directory.
func TestAccountStreamsRestart(t *testing.T) {
	dir, users := t.TempDir(), streamAccountsFile(t)
	start := func() *server.Server {
		cfg := server.DefaultConfig()
		cfg.Host, cfg.Port, cfg.HTTPAddr, cfg.MQTTPort, cfg.MQTTWSPort, cfg.UDPPort, cfg.KafkaPort = "127.0.0.1", 0, "", -1, -1, -1, -1
		cfg.StoreDir, cfg.UsersFile = dir, users
		s, err := server.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	stop := func(s *server.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ctx := bounded(t)
	s := start()
	for _, tn := range tenants(t, s) {
		if _, err := tn.js.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxBytes: 64 << 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "work"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.js.Publish(ctx, "orders.new", []byte(tn.who)); err != nil {
			t.Fatal(err)
		}
		tn.c.Close()
	}
	stop(s)
	if _, err := os.Stat(filepath.Join(dir, "streams", "ORDERS", "stream.json")); err != nil {
		t.Fatalf("the global account's stream directory: %v", err)
	}
	s = start()
	defer stop(s)
	for _, tn := range tenants(t, s) {
		list, err := tn.js.ListStreams(ctx)
		if err != nil || len(list) != 1 || list[0].Config.Name != "ORDERS" || list[0].State.Msgs != 1 || list[0].State.Consumers != 1 {
			t.Fatalf("%s after a restart: %+v, %v", tn.who, list, err)
		}
		msgs, err := tn.js.Pull("ORDERS", "work").Fetch(ctx, 5, tern.FetchMaxWait(time.Second))
		if err != nil || len(msgs) != 1 || string(msgs[0].Data) != tn.who || msgs[0].Subject != "orders.new" {
			t.Fatalf("%s after a restart: pulled %d, %v", tn.who, len(msgs), err)
		}
		if err := msgs[0].AckSync(ctx); err != nil {
			t.Fatal(err)
		}
		if ack, err := tn.js.Publish(ctx, "orders.more", []byte(tn.who)); err != nil || ack.Seq != 2 {
			t.Fatalf("%s after a restart: publish %+v, %v", tn.who, ack, err)
		}
	}
}

// TestAccountWorkQueueAndDeadLetters: an account's work queue removes what its
// consumer acknowledges, and a terminated message goes to the consumer's
// dead-letter subject in the account's names, where a stream of the account
// keeps it.
func TestAccountWorkQueueAndDeadLetters(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = streamAccountsFile(t) })
	ctx := bounded(t)
	b := connectAs(t, s, "b:pw").Streams()
	if _, err := b.AddStream(ctx, tern.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: tern.RetainWorkQueue}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddStream(ctx, tern.StreamConfig{Name: "DEAD", Subjects: []string{streamapi.DeadLetterPrefix + ">"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddConsumer(ctx, "JOBS", tern.ConsumerConfig{Durable: "worker"}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{"jobs.ok", "jobs.bad"} {
		if _, err := b.Publish(ctx, j, []byte(j)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := b.Pull("JOBS", "worker").Fetch(ctx, 2)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("fetch: %d, %v", len(msgs), err)
	}
	if err := msgs[0].AckSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := msgs[1].Term("broken"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		jobs, err1 := b.StreamInfo(ctx, "JOBS")
		dead, err2 := b.StreamInfo(ctx, "DEAD")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if jobs.State.Msgs == 0 && dead.State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JOBS has %d messages, DEAD %d: want 0 and 1", jobs.State.Msgs, dead.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m, err := b.GetMsg(ctx, "DEAD", 0, 1)
	if err != nil || m.Subject != streamapi.DeadLetterPrefix+"JOBS.worker" || string(m.Data) != "jobs.bad" {
		t.Fatalf("dead letter %+v, %v", m, err)
	}
}

// TestAccountStreamsReplicated: in a cluster that replicates, two accounts and
// the global one each make a stream ORDERS of 3 replicas; each publishes and
// consumes through nodes other than the one it created it on, and lists only its
// own; an account's max_storage holds across the cluster.
func TestAccountStreamsReplicated(t *testing.T) {
	users := streamAccountsFile(t)
	nodes := servertest.StartCluster(t, 3, func(_ int, c *server.Config) { c.ClusterSize, c.UsersFile = 3, users })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := func(i int, who string) *tern.Streams {
		return connectAs(t, nodes[i], who+":pw").Streams(tern.APITimeout(5 * time.Second))
	}
	whos := []string{"a", "b", "root"}
	for i, who := range whos {
		js := conn(i, who)
		var info *tern.StreamInfo
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for {
			// The meta group may still be electing its leader.
			info, err = js.AddStream(ctx, tern.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxBytes: 64 << 10, Replicas: 3})
			var ae *tern.APIError
			if err == nil || !errors.As(err, &ae) || ae.Code != streamapi.CodeUnavailable || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: creating ORDERS of 3 replicas: %v", who, err)
		}
		if info.Config.Name != "ORDERS" || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 3 {
			t.Fatalf("%s: created %+v (cluster %+v), want 3 replicas", who, info.Config, info.Cluster)
		}
	}
	for i, who := range whos {
		js := conn((i+1)%3, who)
		deadline := time.Now().Add(15 * time.Second)
		for n := 1; n <= 2; {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			ack, err := js.Publish(pctx, "orders.new", []byte(who), tern.MsgID(fmt.Sprintf("%s-%d", who, n)))
			pcancel()
			if err == nil {
				if ack.Stream != "ORDERS" || ack.Seq != uint64(n) {
					t.Fatalf("%s: publish ack %+v, want ORDERS seq %d", who, ack, n)
				}
				n++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: publish: %v", who, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, who := range whos {
		js := conn((i+2)%3, who)
		// The catalogue is read through the meta group's leader: on a loaded
		// machine an election may leave it without one for a moment (503).
		list, err := js.ListStreams(ctx)
		for deadline := time.Now().Add(15 * time.Second); err != nil && strings.Contains(err.Error(), "503") && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			list, err = js.ListStreams(ctx)
		}
		if err != nil || len(list) != 1 || list[0].Config.Name != "ORDERS" || list[0].State.Msgs != 2 {
			t.Fatalf("%s: list %+v, %v: want its ORDERS alone with 2 messages", who, list, err)
		}
		if list[0].Cluster == nil || len(list[0].Cluster.Replicas) != 3 {
			t.Fatalf("%s: listed cluster %+v", who, list[0].Cluster)
		}
		if _, err := js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "pull"}); err != nil {
			t.Fatalf("%s: consumer: %v", who, err)
		}
		msgs, err := js.Pull("ORDERS", "pull").Fetch(ctx, 2)
		if err != nil || len(msgs) != 2 {
			t.Fatalf("%s: fetch: %d, %v", who, len(msgs), err)
		}
		for _, m := range msgs {
			if m.Subject != "orders.new" || string(m.Data) != who {
				t.Fatalf("%s: pulled %s %q", who, m.Subject, m.Data)
			}
			if err := m.AckSync(ctx); err != nil {
				t.Fatalf("%s: ack: %v", who, err)
			}
		}
		ci, err := js.ConsumerInfo(ctx, "ORDERS", "pull")
		if err != nil || ci.NumAckPending != 0 || ci.NumPending != 0 {
			t.Fatalf("%s: consumer %+v, %v", who, ci, err)
		}
		c := connectAs(t, nodes[i], who+":pw")
		sub, err := c.SubscribeSync("deliver.orders")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := js.AddConsumer(ctx, "ORDERS", tern.ConsumerConfig{Durable: "push", DeliverSubject: "deliver.orders"}); err != nil {
			t.Fatalf("%s: push consumer: %v", who, err)
		}
		for range 2 {
			m, err := sub.NextMsg(10 * time.Second)
			if err != nil || string(m.Data) != who || m.Subject != "orders.new" {
				t.Fatalf("%s: push: %v", who, err)
			}
			if err := m.AckSync(ctx); err != nil {
				t.Fatalf("%s: ack of a push: %v", who, err)
			}
		}
	}
	// acme has 1 MiB: 64 KiB in ORDERS, so 1 MiB more is refused, wherever asked.
	_, err := conn(2, "a").AddStream(ctx, tern.StreamConfig{Name: "MORE", Subjects: []string{"more.>"}, MaxBytes: 1 << 20, Replicas: 3})
	var ae *tern.APIError
	if !errors.As(err, &ae) || ae.Code != streamapi.CodeLimits {
		t.Fatalf("acme past its max_storage in the cluster: %v", err)
	}
	if err := conn(1, "b").DeleteStream(ctx, "ORDERS"); err != nil {
		t.Fatal(err)
	}
	for i, who := range []string{"a", "root"} {
		if info, err := conn(i, who).StreamInfo(ctx, "ORDERS"); err != nil || info.State.Msgs != 2 {
			t.Fatalf("%s's ORDERS after beta deleted its own: %+v, %v", who, info, err)
		}
	}
}

// TestAccountStreamCapturesImports: a stream of beta capturing the subjects beta
// imports from acme keeps acme's messages under beta's names for them, besides
// beta's own; acme's messages beta does not import stay out.
func TestAccountStreamCapturesImports(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = accountsFile(t) })
	ctx := bounded(t)
	a, b := connectAs(t, s, "a:pw"), connectAs(t, s, "b:pw")
	if _, err := b.Streams().AddStream(ctx, tern.StreamConfig{Name: "FROM_ACME", Subjects: []string{"acme.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"public.news", "private.plans", "public.weather"} {
		if err := a.Publish(subj, []byte("acme's "+subj)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Streams().Publish(ctx, "acme.public.local", []byte("beta's own")); err != nil {
		t.Fatal(err)
	}
	var info *tern.StreamInfo
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if info, err = b.Streams().StreamInfo(ctx, "FROM_ACME"); err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := b.Streams().GetMsg(ctx, "FROM_ACME", 0, seq)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject+"="+string(m.Data))
	}
	want := []string{"acme.public.news=acme's public.news", "acme.public.weather=acme's public.weather", "acme.public.local=beta's own"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("FROM_ACME holds %q, want %q", got, want)
	}
}
