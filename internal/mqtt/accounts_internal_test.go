package mqtt

import (
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/auth"
	"github.com/tern-mq/tern/internal/broker"
	"github.com/tern-mq/tern/internal/mqtt/packet"
	"github.com/tern-mq/tern/internal/replica"
	"golang.org/x/crypto/bcrypt"
)

// TestSessionKeys: the global account keeps the client id as the key, as stores
// made before accounts have it; another account's key holds its name and never
// equals another account's or a global client's, and the keys of records made of
// it split back.
func TestSessionKeys(t *testing.T) {
	a := testAuth(t, "")
	if got := sessionKey(nil, "dev"); got != "dev" {
		t.Fatalf("key of the global account %q", got)
	}
	if got := sessionKey(a.UserNamed("root").Account, "dev"); got != "dev" {
		t.Fatalf("key of a global user %q", got)
	}
	k := sessionKey(a.UserNamed("a").Account, "dev")
	if k != "acme\x00dev" {
		t.Fatalf("key of acme's client %q", k)
	}
	if acct, id := splitKey(k); acct != "acme" || id != "dev" {
		t.Fatalf("splitKey(%q) = %q, %q", k, acct, id)
	}
	if p := keyPrefix(k); p != "$A.acme." {
		t.Fatalf("keyPrefix(%q) = %q", k, p)
	}
	if p := keyPrefix("dev"); p != "" {
		t.Fatalf("keyPrefix of a global key = %q", p)
	}
	if client, n, ok := parseIDKey(kvMessage, msgKey(k, 42)[len(kvMessage):]); !ok || client != k || n != 42 {
		t.Fatalf("parseIDKey of an account's message key: %q %d %v", client, n, ok)
	}
	if client, n, ok := parseIDKey(kvQoS2, qos2Key("dev", 7)[len(kvQoS2):]); !ok || client != "dev" || n != 7 {
		t.Fatalf("parseIDKey of a global QoS 2 key: %q %d %v", client, n, ok)
	}
	if c := clientOfWill(k + "\x00n1/life/3"); c != k {
		t.Fatalf("clientOfWill = %q", c)
	}
	for _, tc := range []struct{ subj, prefix, ext, reply string }{
		{"$A.acme.a.b", "$A.acme.", "a.b", "a.b"},
		{"a.b", "", "a.b", "a.b"},
		{"$A.beta.a.b", "$A.acme.", "$A.beta.a.b", ""},
	} {
		if got := string(external([]byte(tc.subj), tc.prefix)); got != tc.ext {
			t.Errorf("external(%q, %q) = %q", tc.subj, tc.prefix, got)
		}
		if got := string(externalReply([]byte(tc.subj), tc.prefix)); got != tc.reply {
			t.Errorf("externalReply(%q, %q) = %q", tc.subj, tc.prefix, got)
		}
	}
}

// TestMQTTGroupKeepsAccountsApart: the cluster's MQTT group indexes a stored
// session of an account by its account's subjects: a publish inside acme is
// stored for acme's session only, under the topic acme's client knows, and one of
// the global account for the global session of the same client id only.
func TestMQTTGroupKeepsAccountsApart(t *testing.T) {
	st := NewState(100, nil)
	rec := []byte(`{"expiry_ns":-1,"subs":[{"filter":"cmd/#","qos":1},{"filter":"#","qos":1}]}`)
	e := binary.AppendUvarint(nil, 5)
	e = appendItem(e, &kvOp{key: kvSession + "acme\x00dev", val: rec})
	e = appendItem(e, &kvOp{key: kvSession + "beta\x00dev", val: rec})
	e = appendItem(e, &kvOp{key: kvSession + "dev", val: rec})
	e = appendItem(e, &kvOp{pub: &pubItem{id: 1, subject: []byte("$A.acme.cmd.k1"), reply: []byte("$A.acme.re"), payload: []byte("acme"), qos: 1}})
	e = appendItem(e, &kvOp{pub: &pubItem{id: 2, subject: []byte("cmd.k1"), payload: []byte("global"), qos: 1}})
	if err := st.Apply([]replica.Entry{{Index: 1, Data: e}}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"acme\x00dev": "acme", "dev": "global", "beta\x00dev": ""} {
		_, msgs, _, ok := st.storedOf(key)
		if !ok {
			t.Fatalf("%q: no stored session", key)
		}
		if want == "" {
			if len(msgs) != 0 {
				t.Fatalf("%q got %+v, want nothing", key, msgs)
			}
			continue
		}
		if len(msgs) != 1 || string(msgs[0].Payload) != want || msgs[0].Topic != "cmd/k1" {
			t.Fatalf("%q got %+v, want one message %q on cmd/k1", key, msgs, want)
		}
		if want == "acme" && msgs[0].Reply != "re" {
			t.Fatalf("acme's message has reply %q, want re", msgs[0].Reply)
		}
	}
}

// TestAccountSubscriptionsCounted: an account's subscriptions are counted while
// its sessions hold them, one per filter: a restored session's count, whatever
// the maximum, and none once the session ends.
func TestAccountSubscriptionsCounted(t *testing.T) {
	a := testAuth(t, "max_subscriptions = 1")
	acme := a.UserNamed("a").Account
	dir := t.TempDir()
	start := func() (*Server, string) {
		srv, err := NewServer(Config{StoreDir: dir, SysInterval: -1, IdleAfter: -1, Auth: a}, broker.New(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		return srv, ln.Addr().String()
	}
	srv, addr := start()
	c := dialTest(t, addr)
	c.write(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311, ClientID: "dev", Username: "a", HasUsername: true, Password: []byte("pw"), HasPassword: true})
	c.read() // CONNACK
	c.write(&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: "cmd/#", QoS: 1}}})
	if sa := c.read().(*packet.Suback); sa.Reasons[0] != 1 {
		t.Fatalf("SUBACK %v", sa.Reasons)
	}
	if _, subs := acme.Usage(); subs != 1 {
		t.Fatalf("acme counts %d subscriptions, want 1 (one filter, two broker subscriptions)", subs)
	}
	_ = c.nc.Close()
	waitFor(t, func() bool { conns, _ := acme.Usage(); return conns == 0 })
	if _, subs := acme.Usage(); subs != 1 {
		t.Fatalf("acme counts %d subscriptions while the session is kept, want 1", subs)
	}
	if err := srv.Shutdown(time.Second); err != nil {
		t.Fatal(err)
	}
	acme.ReleaseSubscriptions(1) // as a new process would start: from nothing

	srv, addr = start()
	defer func() { _ = srv.Shutdown(time.Second) }()
	if _, subs := acme.Usage(); subs != 1 {
		t.Fatalf("acme counts %d subscriptions after the restore, want 1", subs)
	}
	c = dialTest(t, addr)
	c.write(&packet.Connect{ProtocolName: "MQTT", ProtocolLevel: packet.V311, ClientID: "dev", CleanStart: true, Username: "a", HasUsername: true, Password: []byte("pw"), HasPassword: true})
	c.read()
	waitFor(t, func() bool { _, subs := acme.Usage(); return subs == 0 })
}

// testAuth is an authenticator of users a (account acme, with limits) and root
// (global), password "pw".
func testAuth(t *testing.T, limits string) *auth.Authenticator {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(t.TempDir(), "users.toml")
	data := "[[accounts]]\nname = \"acme\"\n" + limits + "\n\n[[users]]\nname = \"a\"\naccount = \"acme\"\npassword = \"" + string(hash) +
		"\"\n\n[[users]]\nname = \"root\"\npassword = \"" + string(hash) + "\"\n"
	if err := os.WriteFile(users, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Options{UsersFile: users})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type testConn struct {
	t  *testing.T
	nc net.Conn
	r  *packet.Reader
}

func dialTest(t *testing.T, addr string) *testConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	r := packet.NewReader(nc, 1<<20)
	r.SetVersion(packet.V311)
	return &testConn{t: t, nc: nc, r: r}
}

func (c *testConn) write(p packet.Packet) {
	c.t.Helper()
	b, err := packet.Append(nil, p, packet.V311)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *testConn) read() packet.Packet {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := c.r.ReadPacket()
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
