package auth

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/xdg-go/scram"
)

const accountsTOML = `
[[accounts]]
name = "acme"
max_msg_rate = 100
exports = [{ subjects = "public.>", to = ["beta"] }, { subjects = "feed.*" }]

[[accounts]]
name = "beta"
imports = [
  { account = "acme", subjects = "public.>", prefix = "acme" },
  { account = "acme", subjects = "feed.*" },
]

[[users]]
name = "a"
account = "acme"

[[users]]
name = "g"
`

func TestAccountsFile(t *testing.T) {
	tab, err := parseUsersFile([]byte(accountsTOML), nil)
	if err != nil {
		t.Fatal(err)
	}
	acme, beta, global := tab.accounts["acme"], tab.accounts["beta"], tab.accounts[GlobalAccount]
	if tab.byName["a"].user.Account != acme || tab.byName["g"].user.Account != global || !global.Global() || acme.Global() {
		t.Fatal("users not in their accounts")
	}
	if got := string(acme.AppendInternal(nil, []byte("orders.new"))); got != "$A.acme.orders.new" {
		t.Fatalf("internal subject %q", got)
	}
	if ext, own := acme.External([]byte("$A.acme.orders.new")); !own || string(ext) != "orders.new" {
		t.Fatalf("external %q %v", ext, own)
	}
	if _, own := acme.External([]byte("$A.beta.x")); own {
		t.Fatal("another account's subject taken as acme's")
	}
	cases := map[string][]ImportedSubscription{
		">":                {{"$A.acme.public.>", 8, "acme."}, {"$A.acme.feed.*", 8, ""}},
		"acme.public.news": {{"$A.acme.public.news", 8, "acme."}},
		"acme.*.news":      {{"$A.acme.public.news", 8, "acme."}},
		"feed.x":           {{"$A.acme.feed.x", 8, ""}},
		"orders.>":         nil,
	}
	for f, want := range cases {
		if got := beta.Imports(f); !reflect.DeepEqual(got, want) {
			t.Errorf("imports of %q = %v, want %v", f, got, want)
		}
	}
	if acme.Imports(">") != nil {
		t.Error("acme imports nothing")
	}
	if _, ok := beta.Service([]byte("acme.public.news")); ok {
		t.Error("a subject import taken as a service")
	}
	bad := map[string]string{
		"not exported":         "[[accounts]]\nname = \"x\"\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", subjects = \"a.>\" }]\n",
		"not to y":             "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\", to = [\"z\"] }]\n[[accounts]]\nname = \"z\"\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", subjects = \"a.>\" }]\n",
		"wider":                "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.b\" }]\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", subjects = \"a.>\" }]\n",
		"dollar":               "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"$TERN.>\" }]\n",
		"bad name":             "[[accounts]]\nname = \"a.b\"\n",
		"twice":                "[[accounts]]\nname = \"x\"\n[[accounts]]\nname = \"x\"\n",
		"no account":           "[[users]]\nname = \"u\"\naccount = \"nope\"\n",
		"self":                 "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\" }]\nimports = [{ account = \"x\", subjects = \"a.>\" }]\n",
		"wild prefix":          "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\" }]\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", subjects = \"a.>\", prefix = \"*\" }]\n",
		"service as subjects":  "[[accounts]]\nname = \"x\"\nexports = [{ services = \"a.>\" }]\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", subjects = \"a.>\" }]\n",
		"subjects as service":  "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\" }]\n[[accounts]]\nname = \"y\"\nimports = [{ account = \"x\", services = \"a.>\" }]\n",
		"both kinds":           "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\", services = \"b.>\" }]\n",
		"neither kind":         "[[accounts]]\nname = \"x\"\nexports = [{ to = [\"y\"] }]\n",
		"bad response":         "[[accounts]]\nname = \"x\"\nexports = [{ services = \"a.>\", response = \"chunked\" }]\n",
		"bad threshold":        "[[accounts]]\nname = \"x\"\nexports = [{ services = \"a.>\", response_threshold = \"soon\" }]\n",
		"response on subjects": "[[accounts]]\nname = \"x\"\nexports = [{ subjects = \"a.>\", response = \"stream\" }]\n",
		"global imports":       "[[accounts]]\nname = \"x\"\nexports = [{ services = \"a.>\" }]\n[[accounts]]\nname = \"global\"\nimports = [{ account = \"x\", services = \"a.>\" }]\n",
	}
	for name, data := range bad {
		if _, err := parseUsersFile([]byte(data), nil); !errors.Is(err, ErrUsersFile) {
			t.Errorf("%s: %v, want ErrUsersFile", name, err)
		}
	}
}

func TestAccountRate(t *testing.T) {
	tab, err := parseUsersFile([]byte(accountsTOML), nil)
	if err != nil {
		t.Fatal(err)
	}
	acme := tab.accounts["acme"] // 100 messages a second, bursts of 100
	now := time.Unix(1000, 0)
	for i := range 100 {
		if d := acme.PublishDelay(now); d != 0 {
			t.Fatalf("message %d of the burst waits %v", i, d)
		}
	}
	if d := acme.PublishDelay(now); d != 10*time.Millisecond {
		t.Fatalf("first message over the burst waits %v, want 10ms", d)
	}
	if d := acme.PublishDelay(now); d != 20*time.Millisecond {
		t.Fatalf("second waits %v, want 20ms", d)
	}
	now = now.Add(time.Second)
	if d := acme.PublishDelay(now); d != 0 {
		t.Fatalf("after a quiet second a message waits %v", d)
	}
	if d := tab.accounts["beta"].PublishDelay(now); d != 0 {
		t.Fatal("an account without a rate waits")
	}
}

// TestAccountUsersOnlyWhereAccountsAreServed: a user of an account other than
// the global one logs in where subjects are kept apart per account (native,
// UDP, monitoring, MQTT, Kafka, with a password or SCRAM), and is refused by the
// others.
func TestAccountUsersOnlyWhereAccountsAreServed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "users.toml")
	data := accountsTOML + "\n[[users]]\nname = \"ap\"\naccount = \"acme\"\npassword = \"" + hash(t, "pw") + "\"\nscram_sha256 = \"" + scramLine(t, SCRAMSHA256, "pw") + "\"\n"
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newAuth(t, Options{UsersFile: p})
	for proto, ok := range map[string]bool{"native": true, "udp": true, "http": true, "mqtt": true, "kafka": true, "other": false} {
		u, err := a.Authenticate(Request{Protocol: proto, Username: "ap", Password: []byte("pw")})
		if (err == nil) != ok {
			t.Errorf("%s: %v %v, want accepted=%v", proto, u, err, ok)
		}
	}
	l, err := a.NewSCRAMLogin(SCRAMSHA256, "kafka", remote)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := scram.SHA256.NewClient("ap", "pw", "")
	conv := c.NewConversation()
	msg, _ := conv.Step("")
	out, err := l.Step([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ = conv.Step(string(out))
	if _, err := l.Step([]byte(msg)); err != nil || !l.Done() || l.User().Account.Name != "acme" {
		t.Fatalf("kafka SCRAM login of an account user: %v (done %v)", err, l.Done())
	}
}

// TestAccountStorageLimits: max_storage takes an integer or a size with a unit,
// max_streams an integer; neither may be negative or malformed.
func TestAccountStorageLimits(t *testing.T) {
	for _, c := range []struct {
		value string
		want  ByteSize
	}{{`1048576`, 1 << 20}, {`"10GiB"`, 10 << 30}, {`"500MB"`, 500_000_000}, {`"64KiB"`, 64 << 10}} {
		tab, err := parseUsersFile([]byte("[[accounts]]\nname = \"x\"\nmax_streams = 4\nmax_storage = "+c.value+"\n"), nil)
		if err != nil {
			t.Fatalf("max_storage = %s: %v", c.value, err)
		}
		if l := tab.accounts["x"].Limits; l.MaxStorage != c.want || l.MaxStreams != 4 {
			t.Fatalf("max_storage = %s: %+v, want %d", c.value, l, c.want)
		}
	}
	for _, bad := range []string{"max_storage = -1", `max_storage = "lots"`, "max_storage = 1.5", "max_streams = -2"} {
		if _, err := parseUsersFile([]byte("[[accounts]]\nname = \"x\"\n"+bad+"\n"), nil); !errors.Is(err, ErrUsersFile) {
			t.Fatalf("%s: %v, want a users file error", bad, err)
		}
	}
}

func TestServiceImportsInTheUsersFile(t *testing.T) {
	tab, err := parseUsersFile([]byte(`
[[accounts]]
name = "acme"
exports = [
  { services = "time.>", to = ["beta"] },
  { services = "feed.*", response = "stream", response_threshold = "10s" },
]
[[accounts]]
name = "beta"
imports = [
  { account = "acme", services = "time.now", prefix = "svc.acme" },
  { account = "acme", services = "feed.*" },
]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	acme, beta := tab.accounts["acme"], tab.accounts["beta"]
	sc, ok := beta.Service([]byte("svc.acme.time.now"))
	if !ok || sc.Exporter != acme || sc.Response.Stream || sc.Response.Threshold != DefaultResponseThreshold {
		t.Fatalf("svc.acme.time.now: %+v %v", sc, ok)
	}
	if got := string(sc.AppendSubject(nil, []byte("svc.acme.time.now"))); got != "$A.acme.time.now" {
		t.Fatalf("exporter's subject %q, want $A.acme.time.now", got)
	}
	sc, ok = beta.Service([]byte("feed.ticks"))
	if !ok || !sc.Response.Stream || sc.Response.Threshold != 10*time.Second {
		t.Fatalf("feed.ticks: %+v %v", sc, ok)
	}
	if got := string(sc.AppendSubject(nil, []byte("feed.ticks"))); got != "$A.acme.feed.ticks" {
		t.Fatalf("exporter's subject %q", got)
	}
	for _, s := range []string{"svc.acme.time.later", "time.now", "feed.a.b", "svc.acme"} {
		if _, ok := beta.Service([]byte(s)); ok {
			t.Errorf("%s taken as a service call", s)
		}
	}
	if len(beta.Imports(">")) != 0 {
		t.Error("service imports taken as subject imports")
	}
}
