package auth

import (
	"strconv"
	"testing"
	"time"
)

func TestPatterns(t *testing.T) {
	match := []struct {
		p, s string
		want bool
	}{
		{"a.b", "a.b", true}, {"a.b", "a.c", false}, {"a.*", "a.b", true}, {"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true}, {"a.>", "a", false}, {">", "x", true}, {"*", "x", true}, {"*.b", "a.b", true},
		{">", "$TERN.API.STREAM.LIST", false}, {"*.API.>", "$TERN.API.X", false},
		{"$TERN.API.>", "$TERN.API.STREAM.LIST", true}, {"$TERN.*.STREAM.LIST", "$TERN.API.STREAM.LIST", true},
	}
	for _, c := range match {
		p, err := parsePattern(c.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.matches([]byte(c.s)); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.p, c.s, got, c.want)
		}
	}
	cover := []struct {
		p, f             string
		covers, overlaps bool
	}{
		{">", "a.*", true, true}, {"a.>", "a.*", true, true}, {"a.*", "a.>", false, true}, {"a.*", "a.b", true, true},
		{"a.b", "a.*", false, true}, {"a.b", "c.*", false, false}, {">", "$TERN.API.>", false, false},
		{"$TERN.>", "$TERN.API.>", true, true}, {"*.b", "a.b.c", false, false}, {"a.*.c", "a.b.>", false, true},
		{">", ">", true, true}, {"a", "a.>", false, false},
	}
	for _, c := range cover {
		p, _ := parsePattern(c.p)
		f, _ := parsePattern(c.f)
		if got := p.covers(f); got != c.covers {
			t.Errorf("%q covers %q = %v, want %v", c.p, c.f, got, c.covers)
		}
		if got := p.overlaps(f); got != c.overlaps {
			t.Errorf("%q overlaps %q = %v, want %v", c.p, c.f, got, c.overlaps)
		}
		if got := f.overlaps(p); got != c.overlaps {
			t.Errorf("%q overlaps %q = %v, want %v (reversed)", c.f, c.p, got, c.overlaps)
		}
	}
}

func TestPermissions(t *testing.T) {
	p, err := NewPermissions(PermissionSpec{
		PublishAllow: []string{"sensors.>", "$TERN.ACK.orders.>"}, PublishDeny: []string{"sensors.secret"},
		SubscribeAllow: []string{"cmd.>", ">"}, SubscribeDeny: []string{"cmd.admin.>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := p.NewChecker()
	for s, want := range map[string]bool{
		"sensors.t1": true, "sensors.secret": false, "orders.new": false, "$TERN.ACK.orders.c.1": true,
		"$TERN.API.STREAM.CREATE.x": false, "$TERN.SYS.META.PROPOSE": false,
	} {
		for range 2 { // the second time from the cache
			if got := c.CanPublish([]byte(s)); got != want {
				t.Errorf("publish %q = %v, want %v", s, got, want)
			}
		}
	}
	subs := []struct {
		f           string
		ok, checked bool
	}{
		{"cmd.x", true, false}, {"cmd.admin.x", false, false}, {"cmd.>", true, true}, {">", true, true},
		{"other.*", true, false}, {"$TERN.SYS.>", false, false}, {"$TERN.API.>", false, false},
	}
	for _, s := range subs {
		ok, checked := c.CanSubscribe(s.f)
		if ok != s.ok || checked != s.checked {
			t.Errorf("subscribe %q = %v, %v; want %v, %v", s.f, ok, checked, s.ok, s.checked)
		}
	}
	recv := []struct {
		s         string
		wildFirst bool
		want      bool
	}{
		{"cmd.admin.reboot", false, false}, {"cmd.x", false, true}, {"$TERN.API.STREAM.LIST", true, false},
		{"$TERN.SYS.REPLY.x", false, false}, {"orders", true, true},
	}
	for _, r := range recv {
		for range 2 {
			if got := c.MayReceive([]byte(r.s), r.wildFirst); got != r.want {
				t.Errorf("receive %q (wild first %v) = %v, want %v", r.s, r.wildFirst, got, r.want)
			}
		}
	}

	var none *Permissions // unrestricted
	u := none.NewChecker()
	if !u.CanPublish([]byte("$TERN.API.STREAM.LIST")) || u.CanPublish([]byte("$TERN.SYS.META.PROPOSE")) {
		t.Error("an unrestricted user may publish to the API but not to cluster traffic")
	}
	if ok, checked := u.CanSubscribe(">"); !ok || !checked {
		t.Errorf("unrestricted subscribe > = %v, %v; want allowed and checked", ok, checked)
	}
	if u.MayReceive([]byte("$A.acme.orders"), true) || !u.MayReceive([]byte("orders"), true) {
		t.Error("an unrestricted wildcard subscription must not see other accounts' subjects")
	}
	if ok, _ := u.CanSubscribe("$A.acme.>"); ok {
		t.Error("unrestricted subscription to another account's subjects allowed")
	}
	if u.CanPublish([]byte("$A.acme.orders")) {
		t.Error("unrestricted publish into another account allowed")
	}
	if ok, checked := u.CanSubscribe("$TERN.>"); !ok || !checked {
		t.Errorf("unrestricted subscribe $TERN.> = %v, %v; want allowed and checked", ok, checked)
	}
	if u.MayReceive([]byte("$TERN.SYS.x"), false) || !u.MayReceive([]byte("$TERN.API.x"), false) {
		t.Error("unrestricted delivery check")
	}
}

func TestCheckerAllocatesNothingOnCachedPublish(t *testing.T) {
	p, _ := NewPermissions(PermissionSpec{PublishAllow: []string{"sensors.>"}})
	c := p.NewChecker()
	s := []byte("sensors.k1.temp")
	c.CanPublish(s)
	if n := testing.AllocsPerRun(100, func() { c.CanPublish(s) }); n != 0 {
		t.Errorf("cached publish check allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.MayReceive(s, false) }); n != 0 {
		t.Errorf("cached delivery check allocates %v times", n)
	}
}

func FuzzUsersFile(f *testing.F) {
	f.Add([]byte("[[users]]\nname = \"a\"\npublish = { allow = [\"a.>\"], deny = [\"a.b\"] }\n"))
	f.Add([]byte("anonymous_user = \"g\"\n[[groups]]\nname = \"g\"\nsubscribe = { allow = [\"*.x\"] }\n[[users]]\nname = \"g\"\ngroups = [\"g\"]\n"))
	f.Add([]byte("[[users]]\nname = \"a\"\ntokens = [\"sha256:00\"]\nscram_sha256 = \"4096:YQ==:YQ==:YQ==\"\n"))
	f.Add([]byte("[[users]]\nname = \"c\"\ncert_subject = \"CN=c\"\ncert_san = \"c@example.com\"\nadmin = true\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tab, err := parseUsersFile(data, nil)
		if err != nil {
			return
		}
		for _, e := range tab.byName {
			c := e.user.Perms.NewChecker()
			c.CanPublish([]byte("a.b"))
			c.CanSubscribe("a.>")
			c.MayReceive([]byte("$TERN.x"), true)
		}
	})
}

func BenchmarkCanPublishCached(b *testing.B) {
	p, _ := NewPermissions(PermissionSpec{PublishAllow: []string{"sensors.>", "orders.*.new"}, PublishDeny: []string{"sensors.secret"}})
	c := p.NewChecker()
	s := []byte("sensors.k1.temp")
	b.ReportAllocs()
	for b.Loop() {
		if !c.CanPublish(s) {
			b.Fatal("denied")
		}
	}
}

func TestAllowResponses(t *testing.T) {
	p, err := NewPermissions(PermissionSpec{PublishAllow: []string{"svc.status"}, SubscribeAllow: []string{"svc.>"}, AllowResponses: true})
	if err != nil {
		t.Fatal(err)
	}
	c := p.NewChecker()
	if !c.TracksRequests() {
		t.Fatal("allow_responses not tracked")
	}
	reply := []byte("_INBOX.abc.1")
	if c.CanPublish(reply) {
		t.Fatal("answer allowed before any request")
	}
	c.NoteRequest(reply, time.Now())
	if !c.CanPublish(reply) {
		t.Fatal("answer to a received request refused")
	}
	if c.CanPublish(reply) {
		t.Fatal("second answer allowed")
	}
	c.NoteRequest([]byte("_INBOX.old"), time.Now().Add(-responseTTL-time.Second))
	if c.CanPublish([]byte("_INBOX.old")) {
		t.Fatal("expired answer allowed")
	}
	c.NoteRequest([]byte("$TERN.SYS.META.PROPOSE.n1"), time.Now())
	if c.CanPublish([]byte("$TERN.SYS.META.PROPOSE.n1")) {
		t.Fatal("a reply subject opened cluster traffic")
	}
	for i := range maxOpenResponses + 10 {
		c.NoteRequest([]byte("_INBOX.x."+strconv.Itoa(i)), time.Now())
	}
	if n := len(c.replies); n > maxOpenResponses {
		t.Fatalf("%d open replies, over the bound %d", n, maxOpenResponses)
	}
	q, _ := NewPermissions(PermissionSpec{PublishAllow: []string{"a"}})
	if q.NewChecker().TracksRequests() {
		t.Fatal("tracked without allow_responses")
	}
}

func TestCanPublishSome(t *testing.T) {
	p, err := NewPermissions(PermissionSpec{PublishAllow: []string{"sensors.>"}, PublishDeny: []string{"sensors.secret.>"}})
	if err != nil {
		t.Fatal(err)
	}
	c := p.NewChecker()
	for filter, want := range map[string]bool{
		"sensors.>": true, "sensors.*.x": true, ">": true, "sensors": false, "orders.>": false,
		"sensors.secret.>": false, "$TERN.SYS.>": false, "sensors.t1": true,
	} {
		if got := c.CanPublishSome(filter); got != want {
			t.Errorf("CanPublishSome(%q) = %v, want %v", filter, got, want)
		}
	}
	var unrestricted *Permissions
	if !unrestricted.NewChecker().CanPublishSome("a.>") || unrestricted.NewChecker().CanPublishSome("$TERN.SYS.x") {
		t.Error("unrestricted checker")
	}
}
