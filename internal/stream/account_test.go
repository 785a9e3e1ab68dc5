package stream

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/streamapi"
)

func TestStreamKeys(t *testing.T) {
	for _, c := range []struct{ account, name, key string }{
		{"", "ORDERS", "ORDERS"},
		{"global", "ORDERS", "ORDERS"},
		{"acme", "ORDERS", "$A.acme.ORDERS"},
		{"a/b c", "X-1", "$A.a/b c.X-1"},
	} {
		if got := Key(c.account, c.name); got != c.key {
			t.Fatalf("Key(%q, %q) = %q, want %q", c.account, c.name, got, c.key)
		}
		acct, name := SplitKey(c.key)
		if acct != normAccount(c.account) || name != c.name {
			t.Fatalf("SplitKey(%q) = %q, %q", c.key, acct, name)
		}
	}
	if got := accountDir("a/b.c%"); got != "a%2Fb%2Ec%25" {
		t.Fatalf("accountDir = %q", got)
	}
	prefix, acct, rest, ok := CutAccount([]byte("$A.acme.$TERN.API.STREAM.LIST"))
	if !ok || string(prefix) != "$A.acme." || string(acct) != "acme" || string(rest) != "$TERN.API.STREAM.LIST" {
		t.Fatalf("CutAccount: %q %q %q %v", prefix, acct, rest, ok)
	}
	if _, _, _, ok := CutAccount([]byte("$TERN.API.STREAM.LIST")); ok {
		t.Fatal("CutAccount took a global subject for an account's")
	}
}

// TestAccountStreamsOnDisk: streams of the same name and subjects in two
// accounts and the global one are three streams, each capturing its own
// account's subjects, and a restart finds each again in its account.
func TestAccountStreamsOnDisk(t *testing.T) {
	dir := t.TempDir()
	b := broker.New()
	limits := map[string]AccountLimits{"acme": {MaxStorage: 1 << 20, MaxStreams: 2}, "a/b": {}}
	cfg := Config{Dir: dir, Accounts: func(name string) (AccountLimits, bool) {
		l, ok := limits[name]
		return l, ok
	}}
	m, err := New(cfg, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	orders := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxBytes: 1 << 10}
	for _, acct := range []string{"", "acme", "a/b"} {
		if _, err := m.AddAccountStream(acct, orders); err != nil {
			t.Fatalf("account %q: %v", acct, err)
		}
	}
	if _, err := m.AddAccountStream("nobody", orders); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a stream of an undefined account: %v", err)
	}
	if _, err := m.AddAccountStream("acme", streamapi.StreamConfig{Name: "OTHER", Subjects: []string{"orders.x"}, MaxBytes: 1}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlap within an account: %v", err)
	}
	var p broker.Batch
	for _, subj := range []string{"orders.1", "$A.acme.orders.1", "$A.acme.orders.2", "$A.a/b.orders.1", "$A.other.orders.1"} {
		b.Publish(&p, &broker.Message{Subject: []byte(subj), Payload: []byte(subj)})
	}
	p.Flush()
	want := map[string]uint64{"ORDERS": 1, "$A.acme.ORDERS": 2, "$A.a/b.ORDERS": 1}
	check := func(m *Manager) {
		t.Helper()
		for key, n := range want {
			s, err := m.Stream(key)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.state().Msgs != n && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := s.state().Msgs; got != n {
				t.Fatalf("%s: %d messages, want %d", key, got, n)
			}
			msg, err := s.GetMsg(streamapi.MsgGetRequest{Seq: 1})
			if err != nil || msg.Subject != "orders.1" {
				t.Fatalf("%s: first message %+v, %v: want it on orders.1, in its account's names", key, msg, err)
			}
		}
		if got := len(m.Streams()); got != 1 {
			t.Fatalf("the global account lists %d streams", got)
		}
		if _, ok := want["$A.acme.ORDERS"]; !ok {
			return
		}
		if got := m.AccountStreams("acme"); len(got) != 1 || got[0].Name() != "ORDERS" || got[0].Account() != "acme" {
			t.Fatalf("acme lists %v", got)
		}
	}
	check(m)
	m.Close()
	for _, d := range []string{"streams/ORDERS", "accounts/acme/streams/ORDERS", "accounts/a%2Fb/streams/ORDERS"} {
		if _, err := os.Stat(filepath.Join(dir, d, "stream.json")); err != nil {
			t.Fatal(err)
		}
	}
	b = broker.New()
	m, err = New(cfg, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	check(m)
	if err := m.DeleteStream("$A.acme.ORDERS"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "accounts/acme/streams/ORDERS")); !os.IsNotExist(err) {
		t.Fatalf("acme's deleted stream's directory: %v", err)
	}
	delete(want, "$A.acme.ORDERS")
	check(m)
}

// TestAccountReplicaOnDisk: a stream of an account the cluster placed here is
// found again on disk by its key, and removed by it.
func TestAccountReplicaOnDisk(t *testing.T) {
	dir := t.TempDir()
	m, err := New(Config{Dir: dir}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamapi.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}
	for i, acct := range []string{"", "acme"} {
		s, _, err := m.OpenReplica(cfg, time.Now(), ReplicaConfig{Account: acct, Groups: []uint64{uint64(16 + i)}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Key() != Key(acct, "ORDERS") || s.Account() != acct {
			t.Fatalf("replica %q of account %q", s.Key(), s.Account())
		}
	}
	m.Close()
	m, err = New(Config{Dir: dir}, broker.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.AllStreams()) != 0 {
		t.Fatal("replicas recovered at start: the cluster opens them")
	}
	found, err := m.GroupStreams()
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found["ORDERS"][0] != 16 || found["$A.acme.ORDERS"][0] != 17 {
		t.Fatalf("group streams %v", found)
	}
	if err := m.RemoveGroupStream("$A.acme.ORDERS"); err != nil {
		t.Fatal(err)
	}
	if found, _ := m.GroupStreams(); len(found) != 1 || found["ORDERS"] == nil {
		t.Fatalf("after removing acme's: %v", found)
	}
}
