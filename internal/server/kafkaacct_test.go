package server_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// TestKafkaAccountsReplicated: in a cluster that replicates, Kafka clients of
// acme and beta each make a topic ORDERS of 3 replicas: each topic is its
// account's stream, led by one node and placed on three, listed to its account
// only; records produced through any node are read back by their account only;
// acme's max_storage holds for topics made through Kafka.
func TestKafkaAccountsReplicated(t *testing.T) {
	users := streamAccountsFile(t)
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	servertest.StartCluster(t, 3, func(i int, c *server.Config) {
		c.ClusterSize, c.UsersFile, c.KafkaPort = 3, users, ports[i]
	})
	var seeds []string
	for _, p := range ports {
		seeds = append(seeds, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := func(user string, seeds ...string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.SASL(plain.Auth{User: user, Pass: "pw"}.AsMechanism()),
			kgo.RetryTimeout(20*time.Second), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	waitFor := func(what string, fn func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := fn()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	retention := func(n string) map[string]*string { return map[string]*string{"retention.bytes": &n} }

	aadm := kadm.NewClient(client("a", seeds[0]))
	badm := kadm.NewClient(client("b", seeds[1]))
	// acme has max_storage: a topic without retention.bytes is refused.
	waitFor("acme's topic without retention.bytes refused", func() error {
		r, err := aadm.CreateTopic(ctx, 1, 3, nil, "ORDERS")
		if err == nil {
			err = r.Err
		}
		if err != nil && !errors.Is(err, kerr.PolicyViolation) {
			return err
		}
		if !errors.Is(err, kerr.PolicyViolation) {
			return errors.New("created, or refused otherwise: " + r.ErrMessage)
		}
		return nil
	})
	for who, adm := range map[string]*kadm.Client{"acme": aadm, "beta": badm} {
		waitFor(who+"'s ORDERS of 3 replicas", func() error {
			r, err := adm.CreateTopic(ctx, 1, 3, retention("100000"), "ORDERS")
			if err == nil {
				err = r.Err
			}
			if errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
			return err
		})
	}
	// Seen from the third node: each account's ORDERS, placed on 3 replicas
	// with a leader; the global account has no topic.
	ids := map[string][16]byte{}
	for _, who := range []string{"a", "b"} {
		adm := kadm.NewClient(client(who, seeds[2]))
		waitFor(who+"'s metadata", func() error {
			md, err := adm.Metadata(ctx)
			if err != nil {
				return err
			}
			if names := md.Topics.Names(); !slices.Equal(names, []string{"ORDERS"}) {
				return errors.New("topics " + strconv.Quote(slices.Concat(names, []string{""})[0]))
			}
			td := md.Topics["ORDERS"]
			if td.Err != nil || len(td.Partitions) != 1 {
				return errors.New("ORDERS not ready")
			}
			p := td.Partitions[0]
			if p.Err != nil || p.Leader < 0 || len(p.Replicas) != 3 {
				return errors.New("ORDERS's partition not placed")
			}
			ids[who] = td.ID
			return nil
		})
	}
	if ids["a"] == ids["b"] {
		t.Fatal("acme's and beta's ORDERS have one topic id")
	}
	md, err := kadm.NewClient(client("root", seeds[0])).Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != 0 {
		t.Fatalf("the global account lists %v", md.Topics.Names())
	}
	// Records through every node, read back by their account only.
	for _, who := range []string{"a", "b"} {
		cl := client(who, seeds...)
		for i := range 5 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ORDERS", Value: []byte(who + strconv.Itoa(i))}).FirstErr(); err != nil {
				t.Fatalf("%s produce: %v", who, err)
			}
		}
	}
	for _, who := range []string{"a", "b"} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds[2]), kgo.SASL(plain.Auth{User: who, Pass: "pw"}.AsMechanism()),
			kgo.ConsumeTopics("ORDERS"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(got) < 5 && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		cl.Close()
		want := []string{who + "0", who + "1", who + "2", who + "3", who + "4"}
		if !slices.Equal(got, want) {
			t.Fatalf("%s read %v, want %v", who, got, want)
		}
	}
}
