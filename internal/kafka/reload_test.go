package kafka_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
)

// kafkaReloadUsers is the users file of TestKafkaReloadUsers, before the reload
// (after = false) and after: gone is removed, rekeyed's SCRAM credentials
// change, pub may write b and no longer a, reader may no longer read s, wide may
// write w2 as well as w1, same does not change.
func kafkaReloadUsers(t *testing.T, after bool) string {
	scramOf := func(pw string) string {
		s, err := auth.FormatSCRAM(auth.SCRAMSHA512, pw, []byte("reload-test-salt"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pick := func(before, later string) string {
		if after {
			return later
		}
		return before
	}
	users := `
[[users]]
name = "root"
password = %[1]q
admin = true

[[users]]
name = "rekeyed"
scram_sha512 = "` + pick(scramOf(authtest.Password), scramOf("another-pw")) + `"

[[users]]
name = "pub"
password = %[1]q
publish = { allow = ["` + pick("a", "b") + `"] }

[[users]]
name = "reader"
password = %[1]q
subscribe = { allow = ["` + pick("s", "t") + `"] }

[[users]]
name = "wide"
password = %[1]q
publish = { allow = [` + pick(`"w1"`, `"w1", "w2"`) + `] }

[[users]]
name = "same"
password = %[1]q
publish = { allow = ["u"] }
subscribe = { allow = ["u"] }
`
	if !after {
		users += `
[[users]]
name = "gone"
password = %[1]q
`
	}
	return users
}

// kafkaConns returns the ids of the Kafka connections of client id.
func kafkaConns(s *server.Server, id string) []uint64 {
	var out []uint64
	for _, c := range s.Connections() {
		if c.Protocol == "kafka" && c.Name == id {
			out = append(out, c.ID)
		}
	}
	return out
}

// TestKafkaReloadUsers: a reload of the users file reaches Kafka clients
// already connected: the connections of a removed user and of a user whose
// SCRAM credentials changed are closed (and logging in again fails), a revoked
// permission refuses the connection's next request with
// TOPIC_AUTHORIZATION_FAILED, wider rights apply to it at once, and an
// unchanged user's connections stay.
func TestKafkaReloadUsers(t *testing.T) {
	users, write := authtest.ReloadableUsers(t, kafkaReloadUsers(t, false))
	s, addr := startTern(t, func(c *server.Config) { fastGroups(c); c.UsersFile = users })
	nc, err := tern.Connect(s.URL(), tern.Credentials([]byte("root:"+authtest.Password)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, name := range []string{"a", "b", "s", "t", "w1", "w2", "u"} {
		if _, err := nc.Streams().AddStream(ctxT(t), tern.StreamConfig{Name: name, Subjects: []string{name}}); err != nil {
			t.Fatal(err)
		}
	}
	pw := authtest.Password
	opts := []kgo.Opt{kgo.RetryTimeout(2 * time.Second), kgo.RecordRetries(1)}
	as := func(id, mech, user, pass string) *kgo.Client {
		return asUser(t, addr, mech, user, pass, append(opts, kgo.ClientID(id))...)
	}
	produce := func(cl *kgo.Client, topic string) error {
		return cl.ProduceSync(ctxT(t), &kgo.Record{Topic: topic, Value: []byte("v-" + topic)}).FirstErr()
	}
	md, err := kadm.NewClient(as("root", "PLAIN", "root", pw)).Metadata(ctxT(t), "s", "t", "u")
	if err != nil {
		t.Fatal(err)
	}
	fetchCode := func(cl *kgo.Client, topic string) int16 {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = topic, md.Topics[topic].ID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes = 1 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctxT(t), cl)
		if err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}

	gone := as("gone", "PLAIN", "gone", pw)
	rekeyed := as("rekeyed", "SCRAM-SHA-512", "rekeyed", pw)
	pub := as("pub", "PLAIN", "pub", pw)
	reader := as("reader", "PLAIN", "reader", pw)
	wide := as("wide", "PLAIN", "wide", pw)
	same := as("same", "PLAIN", "same", pw)
	for cl, topic := range map[*kgo.Client]string{pub: "a", wide: "w1", same: "u"} {
		if err := produce(cl, topic); err != nil {
			t.Fatalf("producing to %s before the reload: %v", topic, err)
		}
	}
	for _, cl := range []*kgo.Client{gone, rekeyed} {
		if err := cl.Ping(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if c := fetchCode(reader, "s"); c != 0 {
		t.Fatalf("reader fetching s before the reload: code %d", c)
	}
	if err := produce(wide, "w2"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("wide producing to w2 before the reload: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	goneConns, rekeyedConns, sameConns := kafkaConns(s, "gone"), kafkaConns(s, "rekeyed"), kafkaConns(s, "same")
	if len(goneConns) == 0 || len(rekeyedConns) == 0 || len(sameConns) == 0 {
		t.Fatalf("connections: gone %v, rekeyed %v, same %v", goneConns, rekeyedConns, sameConns)
	}

	write(kafkaReloadUsers(t, true))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}

	// (a) The removed user's and the rekeyed user's connections are closed,
	// without a request of theirs; logging in again fails.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := slices.ContainsFunc(kafkaConns(s, "gone"), func(id uint64) bool { return slices.Contains(goneConns, id) }) ||
			slices.ContainsFunc(kafkaConns(s, "rekeyed"), func(id uint64) bool { return slices.Contains(rekeyedConns, id) })
		if !left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections still open: gone %v, rekeyed %v", kafkaConns(s, "gone"), kafkaConns(s, "rekeyed"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, cl := range map[string]*kgo.Client{"gone": gone, "rekeyed": rekeyed} {
		if _, err := cl.Request(ctxT(t), kmsg.NewPtrMetadataRequest()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s after the reload: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}

	// (b) The next produce is decided by the new permissions.
	if err := produce(pub, "a"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("pub producing to a after the reload: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := produce(pub, "b"); err != nil {
		t.Errorf("pub producing to b after the reload: %v", err)
	}
	// (c) Reading: the next fetch is refused.
	if c := fetchCode(reader, "s"); c != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("reader fetching s after the reload: code %d, want TOPIC_AUTHORIZATION_FAILED", c)
	}
	if c := fetchCode(reader, "t"); c != 0 {
		t.Errorf("reader fetching t after the reload: code %d", c)
	}
	// (d) Wider rights on the same connection.
	if err := produce(wide, "w2"); err != nil {
		t.Errorf("wide producing to w2 after the reload: %v", err)
	}
	// (e) Unchanged: the same connections, which go on working.
	if err := produce(same, "u"); err != nil {
		t.Errorf("same producing after the reload: %v", err)
	}
	if c := fetchCode(same, "u"); c != 0 {
		t.Errorf("same fetching u after the reload: code %d", c)
	}
	for _, id := range sameConns {
		if !slices.Contains(kafkaConns(s, "same"), id) {
			t.Errorf("same's connection %d closed by the reload", id)
		}
	}
}
