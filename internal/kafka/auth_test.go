package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/server"
)

// startSecured runs a server with the test users (anonymous clients refused).
func startSecured(t *testing.T) (*server.Server, string) {
	t.Helper()
	return startTern(t, func(c *server.Config) { fastGroups(c); c.UsersFile = authtest.File(t) })
}

// mechanisms are the SASL mechanisms franz-go logs in with, by name.
func mechanism(name, user, pass string) sasl.Mechanism {
	switch name {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	}
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}

var mechanismNames = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// asUser is a franz-go client logged in as user with mechanism mech.
func asUser(t *testing.T, addr, mech, user, pass string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, addr, append([]kgo.Opt{kgo.SASL(mechanism(mech, user, pass))}, opts...)...)
}

func asRoot(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	return asUser(t, addr, "SCRAM-SHA-512", authtest.Root, authtest.RootPassword, opts...)
}

func asAlice(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	return asUser(t, addr, "SCRAM-SHA-256", authtest.Alice, authtest.AlicePassword, opts...)
}

// consumeAs reads n records of topic from its start with the client options given.
func consumeAs(t *testing.T, addr, topic string, n int, opts ...kgo.Opt) []string {
	t.Helper()
	cl := newClient(t, addr, append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(out), n, topic, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// TestKafkaSASLFranz: franz-go logs in with PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512, produces to an auto-created topic and reads it back; a wrong
// password and an unknown user are refused with SASL_AUTHENTICATION_FAILED.
func TestKafkaSASLFranz(t *testing.T) {
	_, addr := startSecured(t)
	for _, mech := range mechanismNames {
		t.Run(mech, func(t *testing.T) {
			topic := "sasl-" + strings.ToLower(strings.ReplaceAll(mech, "-", ""))
			login := kgo.SASL(mechanism(mech, authtest.Root, authtest.RootPassword))
			cl := newClient(t, addr, login, kgo.AllowAutoTopicCreation())
			var recs []*kgo.Record
			for i := range 10 {
				recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s %d", mech, i)})
			}
			if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			got := consumeAs(t, addr, topic, len(recs), login)
			if len(got) != len(recs) || got[0] != mech+" 0" || got[9] != mech+" 9" {
				t.Fatalf("consumed %q", got)
			}

			for _, creds := range [][2]string{{authtest.Alice, "wrong"}, {"nobody", authtest.AlicePassword}} {
				bad := newClient(t, addr, kgo.SASL(mechanism(mech, creds[0], creds[1])), kgo.RetryTimeout(time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := bad.Request(ctx, kmsg.NewPtrMetadataRequest())
				cancel()
				if !errors.Is(err, kerr.SaslAuthenticationFailed) {
					t.Fatalf("%s/%s: %v, want SASL_AUTHENTICATION_FAILED", creds[0], creds[1], err)
				}
			}
		})
	}
}

// TestKafkaAnonymousRefused: with users and anonymous=none (the default with a
// users file), a client that does not authenticate is disconnected at its first
// request that is not ApiVersions or SASL.
func TestKafkaAnonymousRefused(t *testing.T) {
	_, addr := startSecured(t)
	cl := newClient(t, addr, kgo.RetryTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest()); err == nil {
		t.Fatal("an anonymous client was answered")
	}
	r := dialRaw(t, addr)
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	resp := r.do(av).(*kmsg.ApiVersionsResponse)
	keys := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		keys[k.ApiKey] = true
	}
	if !keys[17] || !keys[36] {
		t.Fatalf("ApiVersions does not list SaslHandshake and SaslAuthenticate: %v", resp.ApiKeys)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	r.send(md)
	if !r.closed() {
		t.Fatal("an anonymous Metadata request did not close the connection")
	}
}

// TestKafkaSASLRaw drives the SASL requests by hand: a v0 handshake followed by
// a bare PLAIN token; an unsupported mechanism; SaslAuthenticate without a
// handshake; a request of another API in the middle of the exchange; a
// handshake after authentication.
func TestKafkaSASLRaw(t *testing.T) {
	_, addr := startSecured(t)
	plainToken := []byte("\x00" + authtest.Root + "\x00" + authtest.RootPassword)

	t.Run("v0 bare tokens", func(t *testing.T) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, "PLAIN"
		if resp := r.do(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 || !slices.Contains(resp.SupportedMechanisms, "SCRAM-SHA-512") {
			t.Fatalf("handshake: %+v", resp)
		}
		r.write(append([]byte{0, 0, 0, byte(len(plainToken))}, plainToken...))
		var empty [4]byte
		_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := r.c.Read(empty[:]); err != nil || empty != [4]byte{} {
			t.Fatalf("answer to the PLAIN token: %v %v, want an empty frame", empty, err)
		}
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 9
		if resp := r.do(md).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
			t.Fatalf("metadata after login: %+v", resp)
		}
		hs.Version = 1
		if resp := r.do(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("handshake after login: code %d, want ILLEGAL_SASL_STATE", resp.ErrorCode)
		}
	})
	t.Run("v0 wrong password", func(t *testing.T) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, "PLAIN"
		r.do(hs)
		bad := []byte("\x00root\x00nope")
		r.write(append([]byte{0, 0, 0, byte(len(bad))}, bad...))
		if !r.closed() {
			t.Fatal("a wrong bare PLAIN token did not close the connection")
		}
	})
	t.Run("unsupported mechanism", func(t *testing.T) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "GSSAPI"
		if resp := r.do(hs).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.UnsupportedSaslMechanism.Code {
			t.Fatalf("code %d, want UNSUPPORTED_SASL_MECHANISM", resp.ErrorCode)
		}
		if !r.closed() {
			t.Fatal("connection left open")
		}
	})
	t.Run("authenticate without handshake", func(t *testing.T) {
		r := dialRaw(t, addr)
		sa := kmsg.NewPtrSASLAuthenticateRequest()
		sa.Version, sa.SASLAuthBytes = 2, plainToken
		if resp := r.do(sa).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
			t.Fatalf("code %d, want ILLEGAL_SASL_STATE", resp.ErrorCode)
		}
		if !r.closed() {
			t.Fatal("connection left open")
		}
	})
	t.Run("request during the exchange", func(t *testing.T) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "SCRAM-SHA-256"
		r.do(hs)
		r.send(kmsg.NewPtrMetadataRequest())
		if !r.closed() {
			t.Fatal("a Metadata request between handshake and authenticate did not close the connection")
		}
	})
	t.Run("v1 PLAIN failure", func(t *testing.T) {
		r := dialRaw(t, addr)
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, "PLAIN"
		r.do(hs)
		sa := kmsg.NewPtrSASLAuthenticateRequest()
		sa.Version, sa.SASLAuthBytes = 1, []byte("\x00root\x00nope")
		resp := r.do(sa).(*kmsg.SASLAuthenticateResponse)
		if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || resp.ErrorMessage == nil || !strings.Contains(*resp.ErrorMessage, "PLAIN") {
			t.Fatalf("code %d message %v, want SASL_AUTHENTICATION_FAILED", resp.ErrorCode, resp.ErrorMessage)
		}
		if !r.closed() {
			t.Fatal("connection left open after a failed login")
		}
	})
}

// rootNative is a native client logged in as root.
func rootNative(t *testing.T, s *server.Server) *tern.Conn {
	t.Helper()
	nc, err := tern.Connect(s.URL(), tern.Credentials([]byte(authtest.Root+":"+authtest.RootPassword)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestKafkaAuthorization: alice (publish sensors.>, not sensors.secret;
// subscribe cmd.> and _INBOX.>) against streams made by root.
func TestKafkaAuthorization(t *testing.T) {
	s, addr := startSecured(t)
	nc := rootNative(t, s)
	for _, sc := range []tern.StreamConfig{
		{Name: "temps", Subjects: []string{"sensors.temp"}},            // alice writes
		{Name: "cmds", Subjects: []string{"cmd.go"}},                   // alice reads
		{Name: "mixed", Subjects: []string{"sensors.mix", "orders.x"}}, // alice writes some
		{Name: "secret", Subjects: []string{"sensors.secret"}},         // alice may not see
	} {
		if _, err := nc.Streams().AddStream(ctxT(t), sc); err != nil {
			t.Fatal(err)
		}
	}
	root := asRoot(t, addr)
	alice := asAlice(t, addr, kgo.RetryTimeout(2*time.Second), kgo.RecordRetries(1))
	produce := func(cl *kgo.Client, topic string, hdr ...kgo.RecordHeader) error {
		return cl.ProduceSync(ctxT(t), &kgo.Record{Topic: topic, Value: []byte("v-" + topic), Headers: hdr}).FirstErr()
	}

	if err := produce(alice, "temps"); err != nil {
		t.Fatalf("alice producing to temps: %v", err)
	}
	if err := produce(alice, "mixed", kgo.RecordHeader{Key: "Tern-Subject", Value: []byte("sensors.mix")}); err != nil {
		t.Fatalf("alice producing to mixed on sensors.mix: %v", err)
	}
	for topic, hdr := range map[string][]kgo.RecordHeader{
		"cmds": nil, "secret": nil, "nope": nil,
		"mixed": {{Key: "Tern-Subject", Value: []byte("orders.x")}},
	} {
		alice := asAlice(t, addr, kgo.RetryTimeout(2*time.Second), kgo.RecordRetries(1))
		if err := produce(alice, topic, hdr...); !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("alice producing to %s: %v, want TOPIC_AUTHORIZATION_FAILED", topic, err)
		}
	}
	if err := produce(root, "cmds"); err != nil {
		t.Fatalf("root producing to cmds: %v", err)
	}
	if got := consumeAs(t, addr, "cmds", 1, kgo.SASL(mechanism("PLAIN", authtest.Alice, authtest.AlicePassword))); got[0] != "v-cmds" {
		t.Fatalf("alice read %q from cmds", got)
	}
	if got := consumeAs(t, addr, "temps", 1, kgo.SASL(mechanism("PLAIN", authtest.Root, authtest.RootPassword))); got[0] != "v-temps" {
		t.Fatalf("root read %q from temps", got)
	}

	// Fetch and ListOffsets of a topic alice may not read.
	ctx := ctxT(t)
	aadm, radm := kadm.NewClient(alice), kadm.NewClient(root)
	rmd, err := radm.Metadata(ctx, "temps")
	if err != nil {
		t.Fatal(err)
	}
	fr := kmsg.NewPtrFetchRequest()
	fr.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "temps", rmd.Topics["temps"].ID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	fresp, err := fr.RequestWith(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if c := fresp.Topics[0].Partitions[0].ErrorCode; c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alice fetching temps: code %d, want TOPIC_AUTHORIZATION_FAILED", c)
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	for _, topic := range []string{"temps", "cmds"} {
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = topic
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = -1
		lt.Partitions = append(lt.Partitions, lp)
		lreq.Topics = append(lreq.Topics, lt)
	}
	lresp, err := lreq.RequestWith(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range lresp.Topics {
		p := lt.Partitions[0]
		if want := map[string]int16{"temps": kerr.TopicAuthorizationFailed.Code, "cmds": 0}[lt.Topic]; p.ErrorCode != want || (want == 0 && p.Offset != 1) {
			t.Fatalf("alice listing %s's offsets: code %d offset %d", lt.Topic, p.ErrorCode, p.Offset)
		}
	}

	// Metadata: every topic alice may read or write, no other.
	md, err := aadm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Topics.Names(); !slices.Equal(sorted(got), []string{"cmds", "mixed", "temps"}) {
		t.Fatalf("alice sees topics %v", got)
	}
	md, err = radm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Topics.Names(); !slices.Contains(got, "secret") {
		t.Fatalf("root sees topics %v", got)
	}
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("secret")
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if c := mresp.Topics[0].ErrorCode; c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("alice's Metadata of secret: code %d, want TOPIC_AUTHORIZATION_FAILED", c)
	}

	// Topic administration: root only.
	if resp, err := aadm.CreateTopic(ctx, 1, 1, nil, "alices"); !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(resp.Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice creating a topic: %v %v", err, resp.Err)
	}
	if resp, err := radm.CreateTopic(ctx, 1, 1, nil, "roots"); err != nil || resp.Err != nil {
		t.Fatalf("root creating a topic: %v %v", err, resp.Err)
	}
	if resps, err := aadm.DeleteTopics(ctx, "temps"); err != nil || !errors.Is(resps["temps"].Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice deleting temps: %v %+v", err, resps["temps"])
	}
	if resps, err := aadm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("60000")}}, "temps"); err != nil || !errors.Is(resps[0].Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice altering temps: %v %+v", err, resps)
	}
	if resps, err := aadm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Name: "x", Value: kmsg.StringPtr("1")}}); err != nil || !errors.Is(resps[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice altering the broker: %v %+v", err, resps)
	}
	if resps, err := aadm.DeleteRecords(ctx, kadm.Offsets{"temps": {0: {At: 1}}}); err != nil || !errors.Is(resps["temps"][0].Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice deleting temps' records: %v %+v", err, resps)
	}
	if resps, err := radm.DeleteTopics(ctx, "roots"); err != nil || resps["roots"].Err != nil {
		t.Fatalf("root deleting a topic: %v %+v", err, resps["roots"])
	}

	// Groups: alice commits on the topic she reads and not on the other one.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "cmds", Partition: 0, At: 1, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: "temps", Partition: 0, At: 1, LeaderEpoch: -1})
	cresp, err := aadm.CommitOffsets(ctx, "alice-group", offs)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := cresp.Lookup("cmds", 0); r.Err != nil {
		t.Fatalf("alice committing on cmds: %v", r.Err)
	}
	if r, _ := cresp.Lookup("temps", 0); !errors.Is(r.Err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice committing on temps: %v", r.Err)
	}
	if dresp, err := aadm.DeleteGroups(ctx, "alice-group"); err != nil || !errors.Is(dresp["alice-group"].Err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("alice deleting a group: %v %+v", err, dresp)
	}
	if dresp, err := radm.DeleteGroups(ctx, "alice-group"); err != nil || dresp["alice-group"].Err != nil {
		t.Fatalf("root deleting a group: %v %+v", err, dresp)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestKafkaSASLKcat: kcat (librdkafka) over SASL_PLAINTEXT with SCRAM-SHA-512
// produces and consumes; with a wrong password it fails with an
// authentication error.
func TestKafkaSASLKcat(t *testing.T) {
	_, addr := startSecured(t)
	creds := func(pass string) []string {
		return []string{"-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=" + authtest.Root, "-X", "sasl.password=" + pass}
	}
	kcat(t, addr, "one\ntwo\n", append(creds(authtest.RootPassword), "-P", "-t", "kcat-sasl")...)
	if out := kcat(t, addr, "", append(creds(authtest.RootPassword), "-C", "-t", "kcat-sasl", "-e", "-q")...); out != "one\ntwo\n" {
		t.Fatalf("consumed %q", out)
	}
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-b", addr, "-L", "-m", "5"}, creds("wrong")...)...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errOut, &errOut
	if err := cmd.Run(); err == nil || ctx.Err() != nil {
		t.Fatalf("kcat with a wrong password: %v (%v)\n%s", err, ctx.Err(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "SASL authentication error: authentication failed") {
		t.Fatalf("kcat with a wrong password did not report an authentication error:\n%s", errOut.String())
	}
}

// pythonSCRAM produces N records to topic T with confluent-kafka and reads them
// back with kafka-python, both logged in with SCRAM over SASL_PLAINTEXT.
// Arguments: address, topic, N, mechanism, user, password.
const pythonSCRAM = `
import sys, time
from confluent_kafka import Producer
from kafka import KafkaConsumer
addr, topic, n, mech, user, pw = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
p = Producer({'bootstrap.servers': addr, 'security.protocol': 'SASL_PLAINTEXT', 'sasl.mechanisms': mech,
              'sasl.username': user, 'sasl.password': pw})
for i in range(n):
    p.produce(topic, str(i).encode())
if p.flush(20) != 0:
    sys.exit("produce: records left unsent")
c = KafkaConsumer(topic, bootstrap_servers=addr, security_protocol='SASL_PLAINTEXT', sasl_mechanism=mech,
                  sasl_plain_username=user, sasl_plain_password=pw, auto_offset_reset='earliest',
                  consumer_timeout_ms=20000)
got = []
for m in c:
    got.append(m.value.decode())
    if len(got) == n:
        break
c.close()
print(" ".join(got))
`

// TestKafkaSASLPython: confluent-kafka produces and kafka-python consumes, with
// SCRAM-SHA-256 and SCRAM-SHA-512.
func TestKafkaSASLPython(t *testing.T) {
	py := python(t)
	_, addr := startTern(t, func(c *server.Config) { c.UsersFile = authtest.File(t); c.KafkaAutoCreate = true })
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			topic := "py-" + strings.ToLower(strings.ReplaceAll(mech, "-", ""))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "-c", pythonSCRAM, addr, topic, strconv.Itoa(5), mech, authtest.Root, authtest.RootPassword)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s", err, errOut.String())
			}
			if got := strings.TrimSpace(out.String()); got != "0 1 2 3 4" {
				t.Fatalf("consumed %q\n%s", got, errOut.String())
			}
		})
	}
}
