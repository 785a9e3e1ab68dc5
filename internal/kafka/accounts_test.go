package kafka_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/crypto/bcrypt"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/server"
)

// accountUsers writes a users file with two accounts, acme (user "a") and beta
// (user "b"), a global user "root" and a user "t" of account tiny, which has one
// connection at most; every user's password is "pw", with SCRAM credentials.
func accountUsers(t *testing.T) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	scram := func(mech string) string {
		s, err := auth.FormatSCRAM(mech, "pw", []byte("accounts-salt-16"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	user := func(name, account string) string {
		s := "\n[[users]]\nname = \"" + name + "\"\n"
		if account != "" {
			s += "account = \"" + account + "\"\n"
		}
		return s + "password = \"" + string(h) + "\"\nscram_sha256 = \"" + scram(auth.SCRAMSHA256) +
			"\"\nscram_sha512 = \"" + scram(auth.SCRAMSHA512) + "\"\n"
	}
	data := "[[accounts]]\nname = \"acme\"\n\n[[accounts]]\nname = \"beta\"\n\n[[accounts]]\nname = \"tiny\"\nmax_connections = 1\n" +
		user("a", "acme") + user("b", "beta") + user("t", "tiny") + user("root", "")
	p := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startAccounts(t *testing.T) (*server.Server, string) {
	t.Helper()
	return startTern(t, func(c *server.Config) { fastGroups(c); c.UsersFile = accountUsers(t) })
}

// produceSync produces values to topic and fails the test on any error.
func produceSync(t *testing.T, cl *kgo.Client, topic string, values ...string) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// TestKafkaAccountsIsolateTopics: clients of two accounts and a global one each
// make and use a topic ORDERS of their own: each reads back only its own
// records, and Metadata lists only its own account's topics.
func TestKafkaAccountsIsolateTopics(t *testing.T) {
	_, addr := startAccounts(t)
	users := []string{"a", "b", "root"}
	clients := map[string]*kgo.Client{}
	for i, u := range users {
		mech := []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}[i]
		clients[u] = asUser(t, addr, mech, u, "pw", kgo.AllowAutoTopicCreation())
	}
	for _, u := range users {
		produceSync(t, clients[u], "ORDERS", u+"-1", u+"-2", u+"-3")
	}
	// Only acme has this one.
	produceSync(t, clients["a"], "ACME_ONLY", "x")
	for i, u := range users {
		mech := []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"}[i]
		got := consumeAs(t, addr, "ORDERS", 3, kgo.SASL(mechanism(mech, u, "pw")))
		if want := []string{u + "-1", u + "-2", u + "-3"}; !slices.Equal(got, want) {
			t.Fatalf("%s read %v from ORDERS, want %v", u, got, want)
		}
	}
	for u, want := range map[string][]string{"a": {"ACME_ONLY", "ORDERS"}, "b": {"ORDERS"}, "root": {"ORDERS"}} {
		td, err := kadm.NewClient(clients[u]).ListTopics(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := td.Names(); !slices.Equal(sorted(got), want) {
			t.Fatalf("%s lists topics %v, want %v", u, got, want)
		}
	}
	// Topic ids differ between accounts; asking for another account's topic by
	// name finds none.
	bt, err := kadm.NewClient(asUser(t, addr, "PLAIN", "b", "pw")).ListTopics(ctxT(t), "ACME_ONLY")
	if err != nil {
		t.Fatal(err)
	}
	if d := bt["ACME_ONLY"]; !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("beta describing acme's ACME_ONLY: %v, want UNKNOWN_TOPIC_OR_PARTITION", d.Err)
	}
	at, _ := kadm.NewClient(clients["a"]).ListTopics(ctxT(t), "ORDERS")
	rt, _ := kadm.NewClient(clients["root"]).ListTopics(ctxT(t), "ORDERS")
	if at["ORDERS"].ID == rt["ORDERS"].ID {
		t.Fatal("acme's and the global ORDERS have the same topic id")
	}
	// Deleting acme's ORDERS leaves the others'.
	if resp, err := kadm.NewClient(clients["a"]).DeleteTopics(ctxT(t), "ORDERS"); err != nil || resp.Error() != nil {
		t.Fatalf("delete: %v %v", err, resp.Error())
	}
	if got := consumeAs(t, addr, "ORDERS", 3, kgo.SASL(mechanism("PLAIN", "b", "pw"))); got[0] != "b-1" {
		t.Fatalf("beta's ORDERS after acme's was deleted: %v", got)
	}
}

// TestKafkaAccountsRecordsReachNative: a record a Kafka client of acme produces
// is in acme's stream and reaches acme's native subscriber under acme's subject,
// not beta's nor the global account's.
func TestKafkaAccountsRecordsReachNative(t *testing.T) {
	s, addr := startAccounts(t)
	sub := func(creds string) *tern.Subscription {
		nc, err := tern.Connect(s.URL(), tern.Credentials([]byte(creds)), tern.NoReconnect())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		sb, err := nc.SubscribeSync(">")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		return sb
	}
	acme, beta, global := sub("a:pw"), sub("b:pw"), sub("root:pw")
	cl := asUser(t, addr, "SCRAM-SHA-256", "a", "pw", kgo.AllowAutoTopicCreation())
	produceSync(t, cl, "ORDERS", "hello")
	m, err := acme.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "ORDERS" || string(m.Data) != "hello" {
		t.Fatalf("acme's subscriber got %q %q, want ORDERS hello", m.Subject, m.Data)
	}
	for who, sb := range map[string]*tern.Subscription{"beta": beta, "global": global} {
		if m, err := sb.NextMsg(300 * time.Millisecond); err == nil {
			t.Fatalf("%s's subscriber got %q", who, m.Subject)
		}
	}
	// A native client of acme publishing on ORDERS feeds the same topic.
	nc, err := tern.Connect(s.URL(), tern.Credentials([]byte("a:pw")), tern.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("ORDERS", []byte("native")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := consumeAs(t, addr, "ORDERS", 2, kgo.SASL(mechanism("PLAIN", "a", "pw"))); !slices.Equal(got, []string{"hello", "native"}) {
		t.Fatalf("acme's ORDERS: %v", got)
	}
}

// TestKafkaAccountsGroups: consumer groups of the same id in two accounts are
// two groups: their committed offsets are apart, and each account lists and
// describes its own.
func TestKafkaAccountsGroups(t *testing.T) {
	_, addr := startAccounts(t)
	a := asUser(t, addr, "SCRAM-SHA-256", "a", "pw")
	b := asUser(t, addr, "SCRAM-SHA-512", "b", "pw")
	root := asUser(t, addr, "PLAIN", "root", "pw")
	aadm, badm, radm := kadm.NewClient(a), kadm.NewClient(b), kadm.NewClient(root)
	for _, adm := range []*kadm.Client{aadm, badm, radm} {
		createTopic(t, adm, "ORDERS", 1)
	}
	produceSync(t, a, "ORDERS", "1", "2", "3", "4", "5")
	produceSync(t, b, "ORDERS", "1", "2", "3", "4", "5")
	commit := func(adm *kadm.Client, at int64) {
		t.Helper()
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "ORDERS", Partition: 0, At: at, LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(ctxT(t), "g", os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	commit(aadm, 4)
	commit(badm, 2)
	fetched := func(adm *kadm.Client) int64 {
		t.Helper()
		resp, err := adm.FetchOffsets(ctxT(t), "g")
		if err != nil {
			t.Fatal(err)
		}
		o, ok := resp.Lookup("ORDERS", 0)
		if !ok {
			return -1
		}
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o.At
	}
	if got := fetched(aadm); got != 4 {
		t.Fatalf("acme's group g: offset %d, want 4", got)
	}
	if got := fetched(badm); got != 2 {
		t.Fatalf("beta's group g: offset %d, want 2", got)
	}
	if got := fetched(radm); got != -1 {
		t.Fatalf("the global group g: offset %d, want none", got)
	}
	// A group consuming in acme starts from acme's committed offset.
	cons := asUser(t, addr, "SCRAM-SHA-256", "a", "pw", kgo.ConsumeTopics("ORDERS"), kgo.ConsumerGroup("g"),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < 1 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group consumer of acme: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[0] != "5" {
		t.Fatalf("acme's group g resumed at %q, want 5 (after offset 4)", got[0])
	}
	for adm, want := range map[*kadm.Client][]string{aadm: {"g"}, badm: {"g"}, radm: nil} {
		lg, err := adm.ListGroups(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := lg.Groups(); !slices.Equal(got, want) {
			t.Fatalf("list groups: %v, want %v", got, want)
		}
	}
	cons.Close()
	// Deleting beta's group leaves acme's offsets.
	if resp, err := badm.DeleteGroup(ctxT(t), "g"); err != nil || resp.Err != nil {
		t.Fatalf("delete beta's g: %v %v", err, resp.Err)
	}
	if got := fetched(aadm); got != 4 {
		t.Fatalf("acme's group g after beta's was deleted: offset %d, want 4", got)
	}
}

// TestKafkaAccountConnections: past its account's max_connections a login is
// refused with SASL_AUTHENTICATION_FAILED naming the limit, then closed; the
// count goes down as connections close.
func TestKafkaAccountConnections(t *testing.T) {
	_, addr := startAccounts(t)
	login := func() (*raw, *kmsg.SASLAuthenticateResponse) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "PLAIN"
		r.do(hs)
		sa := kmsg.NewPtrSASLAuthenticateRequest()
		sa.Version, sa.SASLAuthBytes = 1, []byte("\x00t\x00pw")
		return r, r.do(sa).(*kmsg.SASLAuthenticateResponse)
	}
	first, resp := login()
	if resp.ErrorCode != 0 {
		t.Fatalf("first login of tiny: code %d", resp.ErrorCode)
	}
	r, resp := login()
	if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "maximum of 1 connections") {
		t.Fatalf("second login of tiny: code %d message %v, want the account's limit", resp.ErrorCode, resp.ErrorMessage)
	}
	if !r.closed() {
		t.Fatal("connection over the limit left open")
	}
	_ = first.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, resp := login()
		if resp.ErrorCode == 0 {
			_ = r.c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("login after the first connection closed: code %d", resp.ErrorCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKafkaAccountKcat: kcat (librdkafka) logged in with SCRAM as a user of
// acme round-trips records through acme's topic, which the global account does
// not see.
func TestKafkaAccountKcat(t *testing.T) {
	_, addr := startAccounts(t)
	creds := func(user string) []string {
		return []string{"-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanisms=SCRAM-SHA-256",
			"-X", "sasl.username=" + user, "-X", "sasl.password=pw"}
	}
	kcat(t, addr, "one\ntwo\n", append(creds("a"), "-P", "-t", "kcat-acct")...)
	if out := kcat(t, addr, "", append(creds("a"), "-C", "-t", "kcat-acct", "-e", "-q")...); out != "one\ntwo\n" {
		t.Fatalf("acme consumed %q", out)
	}
	if out := kcat(t, addr, "", append(creds("root"), "-L")...); strings.Contains(out, "kcat-acct") {
		t.Fatalf("the global account sees acme's topic:\n%s", out)
	}
}
