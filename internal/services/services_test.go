package services

import (
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/auth/authtest"
	"github.com/tern-mq/tern/internal/broker"
)

type collect struct{ got []string }

func (c *collect) Deliver(_ *broker.Subscription, m *broker.Message) bool {
	c.got = append(c.got, string(m.Subject)+" "+string(m.Payload))
	return true
}
func (c *collect) Flush() {}

// TestRouterMapsAndForgets: a response on a handed-out reply subject reaches the
// requester's reply once (one-response services) or until the threshold
// (streaming ones); cancelled and expired calls are forgotten.
func TestRouterMapsAndForgets(t *testing.T) {
	b := broker.New()
	r := New(b)
	defer r.Close()
	sink := &collect{}
	if err := b.Subscribe(&broker.Subscription{Sink: sink, Subject: "$A.beta._INBOX.>"}); err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Options{UsersFile: authtest.Users(t, "[[accounts]]\nname = \"acme\"\n[[users]]\nname = \"a\"\naccount = \"acme\"\npassword = %[1]q\n")})
	if err != nil {
		t.Fatal(err)
	}
	acme := authn.Account("acme")
	now := time.Now()
	one := auth.ServiceCall{Exporter: acme, Response: auth.ResponseType{Threshold: time.Minute}}
	stream := auth.ServiceCall{Exporter: acme, Response: auth.ResponseType{Stream: true, Threshold: time.Minute}}

	r1, err := r.Call(nil, one, []byte("$A.beta._INBOX.1"), now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(r1), "$A.acme._R_.") {
		t.Fatalf("reply subject %q, want one in acme's space", r1)
	}
	r2, _ := r.Call(nil, stream, []byte("$A.beta._INBOX.2"), now)
	r3, _ := r.Call(nil, one, []byte("$A.beta._INBOX.3"), now)
	var batch broker.Batch
	pub := func(subj []byte, data string) {
		b.Publish(&batch, &broker.Message{Subject: subj, Payload: []byte(data)})
		batch.Flush()
	}
	pub(r1, "a")
	pub(r1, "a again")
	pub(r2, "s1")
	pub(r2, "s2")
	r.Cancel(r3)
	pub(r3, "cancelled")
	want := []string{"$A.beta._INBOX.1 a", "$A.beta._INBOX.2 s1", "$A.beta._INBOX.2 s2"}
	if strings.Join(sink.got, "|") != strings.Join(want, "|") {
		t.Fatalf("delivered %q, want %q", sink.got, want)
	}
	if n := r.Pending(); n != 1 {
		t.Fatalf("%d calls mapped, want the streaming one", n)
	}
	// A call made after the threshold of the others expires them.
	short := auth.ServiceCall{Exporter: acme, Response: auth.ResponseType{Threshold: time.Second}}
	r4, _ := r.Call(nil, short, []byte("$A.beta._INBOX.4"), now.Add(2*time.Minute))
	if n := r.Pending(); n != 1 {
		t.Fatalf("%d calls mapped after the threshold, want only the new one", n)
	}
	pub(r2, "s3 too late")
	if len(sink.got) != 3 {
		t.Fatalf("a response past the threshold was delivered: %q", sink.got)
	}
	_ = r4
}
