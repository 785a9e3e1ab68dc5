package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdg-go/scram"
	"golang.org/x/crypto/bcrypt"
)

func hash(t testing.TB, pw string) string {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func scramLine(t testing.TB, mech, pw string) string {
	s, err := FormatSCRAM(mech, pw, []byte("0123456789abcdef"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testUsers writes a users file: alice (password, SCRAM, restricted through a
// group), bob (token), carol (certificate), root (admin, unrestricted).
func testUsers(t testing.TB) string {
	t.Helper()
	tokenHash := TokenHash([]byte("bob-token"))
	data := `
[[groups]]
name = "devices"
publish = { allow = ["sensors.>"], deny = ["sensors.secret"] }
subscribe = { allow = ["cmd.>", "_INBOX.>"] }

[[users]]
name = "alice"
password = "` + hash(t, "alice-pw") + `"
scram_sha256 = "` + scramLine(t, SCRAMSHA256, "alice-pw") + `"
scram_sha512 = "` + scramLine(t, SCRAMSHA512, "alice-pw") + `"
groups = ["devices"]

[[users]]
name = "bob"
tokens = ["` + tokenHash + `"]
subscribe = { allow = [">"], deny = ["private.>"] }

[[users]]
name = "carol"
cert_subject = "CN=carol,O=Acme"
publish = { allow = ["orders.>"] }
admin = true

[[users]]
name = "root"
password = "` + hash(t, "root-pw") + `"
admin = true
monitor = true
`
	p := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	local  = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
	remote = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5000}
)

func newAuth(t *testing.T, opts Options) *Authenticator {
	t.Helper()
	opts.FailureDelay, opts.MaxFailureDelay = time.Microsecond, 10*time.Microsecond
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAnonymousPolicies(t *testing.T) {
	users := testUsers(t)
	cases := []struct {
		file, policy    string
		local, remote   bool
		wantPolicyInUse string
	}{
		{"", "", true, false, AnonymousLoopback},
		{"", AnonymousAll, true, true, AnonymousAll},
		{"", AnonymousNone, false, false, AnonymousNone},
		{users, "", false, false, AnonymousNone},
		{users, AnonymousLoopback, true, false, AnonymousLoopback},
	}
	for _, c := range cases {
		a := newAuth(t, Options{UsersFile: c.file, Anonymous: c.policy})
		if a.AnonymousPolicy() != c.wantPolicyInUse {
			t.Errorf("file %q policy %q: in use %q, want %q", c.file, c.policy, a.AnonymousPolicy(), c.wantPolicyInUse)
		}
		for _, r := range []struct {
			addr net.Addr
			want bool
		}{{local, c.local}, {remote, c.remote}} {
			u, err := a.Authenticate(Request{Protocol: "native", Remote: r.addr})
			if (err == nil) != r.want {
				t.Errorf("file %q policy %q from %v: err %v, want accepted=%v", c.file, c.policy, r.addr, err, r.want)
			}
			if err != nil && !errors.Is(err, ErrAnonymous) {
				t.Errorf("refusal %v does not wrap ErrAnonymous", err)
			}
			if err == nil && (u.Perms != nil || u.Name != "") {
				t.Errorf("anonymous user %+v, want unrestricted", u)
			}
		}
	}
	if _, err := New(Options{Anonymous: "some"}); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestPasswordsTokensCertificates(t *testing.T) {
	a := newAuth(t, Options{UsersFile: testUsers(t)})
	ok := []Request{
		{Username: "alice", Password: []byte("alice-pw")},
		{Token: []byte("bob-token")},
		{Cert: &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"Acme"}}}},
		{Username: "carol", Cert: &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"Acme"}}}},
		{Username: "root", Token: []byte("root-pw")}, // a password in the token field (MQTT has one field)
	}
	want := []string{"alice", "bob", "carol", "carol", "root"}
	for i, r := range ok {
		r.Remote = remote
		u, err := a.Authenticate(r)
		if err != nil || u.Name != want[i] {
			t.Errorf("request %d: user %v err %v, want %s", i, u, err, want[i])
		}
	}
	bad := []Request{
		{Username: "alice", Password: []byte("wrong")},
		{Username: "nobody", Password: []byte("alice-pw")},
		{Username: "bob", Password: []byte("bob-token")}, // bob has no password
		{Token: []byte("other")},
		{Username: "alice", Cert: &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"Acme"}}}},
		{Username: "alice"},
	}
	for i, r := range bad {
		r.Remote = remote
		if u, err := a.Authenticate(r); !errors.Is(err, ErrDenied) {
			t.Errorf("bad request %d: user %v err %v, want ErrDenied", i, u, err)
		}
	}
	// A certificate that names no user is no credential: the anonymous policy
	// decides (none, with a users file).
	if _, err := a.Authenticate(Request{Remote: remote, Cert: &x509.Certificate{Subject: pkix.Name{CommonName: "mallory"}}}); !errors.Is(err, ErrAnonymous) {
		t.Errorf("unmapped certificate: %v, want ErrAnonymous", err)
	}
	if s := a.Stats()[""]; s.Successes != uint64(len(ok)) || s.Failures != uint64(len(bad))+1 {
		t.Errorf("stats %+v, want %d successes and %d failures", s, len(ok), len(bad))
	}
}

func TestFailedLoginsAreSlowedPerAddress(t *testing.T) {
	a, err := New(Options{UsersFile: testUsers(t), FailureDelay: time.Second, MaxFailureDelay: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	a.throttle.now = func() time.Time { return now }
	host := "192.0.2.7"
	var pauses []time.Duration
	for range 5 {
		pauses = append(pauses, a.throttle.failed(host))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if pauses[i] != want[i] {
			t.Fatalf("pauses %v, want %v", pauses, want)
		}
	}
	if d := a.throttle.delay(host); d != 4*time.Second {
		t.Errorf("next attempt waits %v, want 4s", d)
	}
	if d := a.throttle.delay("192.0.2.8"); d != 0 {
		t.Errorf("another address waits %v", d)
	}
	now = now.Add(forgetAfter + time.Second)
	if d := a.throttle.delay(host); d != 0 {
		t.Errorf("after %v without failures the address still waits %v", forgetAfter, d)
	}
	a.throttle.failed(host)
	a.throttle.succeeded(host)
	if d := a.throttle.delay(host); d != 0 {
		t.Errorf("after a success the address still waits %v", d)
	}
}

func TestReloadKeepsOldUsersOnError(t *testing.T) {
	p := testUsers(t)
	a := newAuth(t, Options{UsersFile: p})
	if err := os.WriteFile(p, []byte("[[users]]\nname = \"x\"\npassword = \"plain\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), "bcrypt") {
		t.Fatalf("reload of a plain-text password: %v", err)
	}
	if _, err := a.Authenticate(Request{Username: "alice", Password: []byte("alice-pw")}); err != nil {
		t.Fatalf("old users lost after a failed reload: %v", err)
	}
	if err := os.WriteFile(p, []byte("[[users]]\nname = \"dave\"\npassword = \""+hash(t, "d")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(Request{Username: "alice", Password: []byte("alice-pw")}); err == nil {
		t.Error("removed user still accepted")
	}
	if _, err := a.Authenticate(Request{Username: "dave", Password: []byte("d")}); err != nil {
		t.Errorf("added user refused: %v", err)
	}
}

func TestSCRAM(t *testing.T) {
	a := newAuth(t, Options{UsersFile: testUsers(t)})
	run := func(mech, user, pw string) (*User, error) {
		hf := scram.SHA256
		if mech == SCRAMSHA512 {
			hf = scram.SHA512
		}
		c, err := hf.NewClient(user, pw, "")
		if err != nil {
			t.Fatal(err)
		}
		conv := c.NewConversation()
		l, err := a.NewSCRAMLogin(mech, "kafka", remote)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := conv.Step("")
		for !l.Done() && err == nil {
			var out []byte
			if out, err = l.Step([]byte(msg)); err != nil {
				return nil, err
			}
			if msg, err = conv.Step(string(out)); err != nil {
				t.Fatalf("client refused the server: %v", err)
			}
		}
		return l.User(), err
	}
	for _, mech := range SCRAMMechanisms {
		if u, err := run(mech, "alice", "alice-pw"); err != nil || u.Name != "alice" {
			t.Errorf("%s alice: %v %v", mech, u, err)
		}
		for _, c := range [][2]string{{"alice", "wrong"}, {"nobody", "alice-pw"}, {"root", "root-pw"}} {
			if _, err := run(mech, c[0], c[1]); !errors.Is(err, ErrDenied) {
				t.Errorf("%s %s/%s: %v, want ErrDenied", mech, c[0], c[1], err)
			}
		}
	}
	if _, err := a.NewSCRAMLogin("SCRAM-SHA-1", "kafka", remote); err == nil {
		t.Error("SCRAM-SHA-1 accepted")
	}
}

func TestUsersFileErrors(t *testing.T) {
	pw := hash(t, "x")
	cases := map[string]string{
		"unknown key":    "[[users]]\nname = \"a\"\npasword = \"" + pw + "\"\n",
		"plain password": "[[users]]\nname = \"a\"\npassword = \"secret\"\n",
		"twice":          "[[users]]\nname = \"a\"\n[[users]]\nname = \"a\"\n",
		"no name":        "[[users]]\npassword = \"" + pw + "\"\n",
		"colon":          "[[users]]\nname = \"a:b\"\n",
		"unknown group":  "[[users]]\nname = \"a\"\ngroups = [\"g\"]\n",
		"bad pattern":    "[[users]]\nname = \"a\"\npublish = { allow = [\"a.>.b\"] }\n",
		"bad token":      "[[users]]\nname = \"a\"\ntokens = [\"plaintoken\"]\n",
		"bad scram":      "[[users]]\nname = \"a\"\nscram_sha256 = \"1:a:b:c\"\n",
		"anonymous_user": "anonymous_user = \"ghost\"\n",
		"shared token":   "[[users]]\nname = \"a\"\ntokens = [\"" + TokenHash([]byte("t")) + "\"]\n[[users]]\nname = \"b\"\ntokens = [\"" + TokenHash([]byte("t")) + "\"]\n",
		"not toml":       "[[users]\n",
	}
	for name, data := range cases {
		if _, err := parseUsersFile([]byte(data), nil); !errors.Is(err, ErrUsersFile) {
			t.Errorf("%s: %v, want ErrUsersFile", name, err)
		}
	}
}
