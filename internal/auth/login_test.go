package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/xdg-go/scram"
)

// rewrite replaces old with new in the users file p.
func rewrite(t *testing.T, p string, pairs ...string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("users file has no %q", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scramLogin runs a SCRAM exchange and returns its Login.
func scramLogin(t *testing.T, a *Authenticator, mech, user, pw string) *Login {
	t.Helper()
	c, err := scram.SHA256.NewClient(user, pw, "")
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
		out, err := l.Step([]byte(msg))
		if err != nil {
			t.Fatalf("scram login: %v", err)
		}
		if msg, err = conv.Step(string(out)); err != nil {
			t.Fatal(err)
		}
	}
	return l.Login()
}

// TestRecheck: after a reload, a login whose proof still holds gets its user as
// the new file defines it; one whose user, password, token, SCRAM credentials,
// certificate mapping or account changed is refused with ErrRevoked, logged and
// counted.
func TestRecheck(t *testing.T) {
	p := testUsers(t)
	rewrite(t, p, "[[users]]\nname = \"root\"", "[[accounts]]\nname = \"acme\"\n\n[[users]]\nname = \"dave\"\npassword = \""+hash(t, "dave-pw")+"\"\n\n[[users]]\nname = \"root\"")
	a := newAuth(t, Options{UsersFile: p, Anonymous: AnonymousAll})
	carolCert := &x509.Certificate{Subject: pkix.Name{CommonName: "carol", Organization: []string{"Acme"}}}
	login := func(r Request) *Login {
		t.Helper()
		r.Remote, r.Protocol = remote, "native"
		l, err := a.Login(r)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	alice := login(Request{Username: "alice", Password: []byte("alice-pw")})
	aliceSCRAM := scramLogin(t, a, SCRAMSHA256, "alice", "alice-pw")
	bob := login(Request{Token: []byte("bob-token")})
	carol := login(Request{Cert: carolCert})
	root := login(Request{Username: "root", Password: []byte("root-pw")})
	dave := login(Request{Username: "dave", Password: []byte("dave-pw")})
	anon := login(Request{})

	if l, err := a.Recheck(alice); l != alice || err != nil || a.Stale(alice) {
		t.Fatalf("recheck without a reload: %v %v, want the same login", l, err)
	}

	// Alice keeps her password and loses cmd.>; bob's token goes; carol's
	// certificate names someone else; root's password changes; dave moves to
	// acme; the anonymous user becomes guest.
	rewrite(t, p,
		`subscribe = { allow = ["cmd.>", "_INBOX.>"] }`, `subscribe = { allow = ["_INBOX.>"] }`,
		`tokens = ["`+TokenHash([]byte("bob-token"))+`"]`, `tokens = ["`+TokenHash([]byte("other-token"))+`"]`,
		`cert_subject = "CN=carol,O=Acme"`, `cert_subject = "CN=carol2,O=Acme"`,
		"name = \"dave\"\n", "name = \"dave\"\naccount = \"acme\"\n",
	)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The same password, hashed again: a hash that differs is a password changed.
	s := regexp.MustCompile(`name = "root"\npassword = "[^"]*`).ReplaceAllLiteralString(string(data),
		`name = "root"`+"\n"+`password = "`+hash(t, "root-pw"))
	s = "anonymous_user = \"guest\"\n" + s + "\n[[users]]\nname = \"guest\"\nsubscribe = { allow = [\"public.>\"] }\n"
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	reloads := 0
	remove := a.OnReload(func() { reloads++ })
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if reloads != 1 {
		t.Fatalf("listener called %d times, want 1", reloads)
	}

	for name, l := range map[string]*Login{"alice": alice, "alice (scram)": aliceSCRAM} {
		if !a.Stale(l) {
			t.Errorf("%s: not stale after the reload", name)
		}
		nl, err := a.Recheck(l)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if nl == l || nl.User().Name != "alice" || SameRights(l.User(), nl.User()) {
			t.Fatalf("%s: %+v, want alice with new rights", name, nl.User())
		}
		if ok, _ := nl.User().Perms.NewChecker().CanSubscribe("cmd.x"); ok {
			t.Errorf("%s: still may subscribe to cmd.x", name)
		}
		if again, err := a.Recheck(nl); again != nl || err != nil {
			t.Errorf("%s: second recheck %v %v, want the same login", name, again, err)
		}
	}
	nl, err := a.Recheck(anon)
	if err != nil || nl.User().Perms == nil {
		t.Errorf("anonymous: %v %v, want the guest's rights", nl, err)
	}
	for name, c := range map[string]struct {
		l      *Login
		reason string
	}{
		"bob":   {bob, "token removed"},
		"carol": {carol, "certificate no longer names the user"},
		"root":  {root, "password changed"},
		"dave":  {dave, `moved from account "global" to "acme"`},
	} {
		if l, err := a.Recheck(c.l); !errors.Is(err, ErrRevoked) || l != nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v %v, want revoked (%s)", name, l, err, c.reason)
		}
	}
	if st := a.Stats()["native"]; st.Revoked != 4 {
		t.Errorf("revoked %d, want 4", st.Revoked)
	}

	// A failed reload changes nothing; a removed listener is not called.
	remove()
	if err := os.WriteFile(p, []byte("[[users]]\nname = \"x\"\npassword = \"plain\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Fatal("bad file reloaded")
	}
	nl, _ = a.Recheck(alice)
	if again, err := a.Recheck(nl); again != nl || err != nil {
		t.Errorf("after a failed reload: %v %v, want the same login", again, err)
	}
	if err := os.WriteFile(p, []byte(""), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if reloads != 1 {
		t.Errorf("removed listener called")
	}
	if _, err := a.Recheck(nl); !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "user removed") {
		t.Errorf("alice removed: %v, want revoked", err)
	}
}

// TestCheckerUpdate: a checker's decisions, cached or not, follow Update.
func TestCheckerUpdate(t *testing.T) {
	open, err := NewPermissions(PermissionSpec{PublishAllow: []string{"sensors.>"}, SubscribeAllow: []string{"cmd.>"}})
	if err != nil {
		t.Fatal(err)
	}
	closed, err := NewPermissions(PermissionSpec{PublishAllow: []string{"sensors.>"}, PublishDeny: []string{"sensors.t1"},
		SubscribeAllow: []string{"cmd.>"}, SubscribeDeny: []string{"cmd.secret"}})
	if err != nil {
		t.Fatal(err)
	}
	c := open.NewChecker()
	s := []byte("sensors.t1")
	if !c.CanPublish(s) || !c.CanPublish(s) || !c.MayReceive([]byte("cmd.secret"), false) {
		t.Fatal("open permissions refuse")
	}
	if _, check := c.CanSubscribe("cmd.>"); check {
		t.Fatal("cmd.> needs checks before the update")
	}
	c.Update(closed)
	if c.CanPublish(s) {
		t.Error("cached decision outlived the update")
	}
	if ok, check := c.CanSubscribe("cmd.>"); !ok || !check {
		t.Errorf("cmd.> after the update: %v %v, want allowed with checks", ok, check)
	}
	if c.MayReceive([]byte("cmd.secret"), false) {
		t.Error("cmd.secret still delivered")
	}
	c.Update(nil)
	if !c.CanPublish([]byte("anything")) || c.CanPublish([]byte("$TERN.SYS.x")) {
		t.Error("unrestricted checker decides wrong")
	}
	c.Update(open)
	if !c.CanPublish(s) {
		t.Error("back to the open permissions: refused")
	}
}

func TestSameRights(t *testing.T) {
	a, err := parseUsersFile([]byte(`
[[users]]
name = "a"
publish = { allow = ["x.>"] }
[[users]]
name = "b"
publish = { allow = ["x.>"] }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseUsersFile([]byte(`
[[users]]
name = "a"
publish = { allow = ["x.>"] }
[[users]]
name = "b"
publish = { allow = ["x.>", "y"] }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !SameRights(a.byName["a"].user, b.byName["a"].user) {
		t.Error("a's rights differ")
	}
	if SameRights(a.byName["b"].user, b.byName["b"].user) {
		t.Error("b's rights are the same")
	}
	if SameRights(a.byName["a"].user, a.byName["b"].user) {
		t.Error("two users the same")
	}
}
