package server

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tern.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigDefaultsWithNothingGiven(t *testing.T) {
	cfg, err := LoadConfig(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg != DefaultConfig() {
		t.Fatalf("got %+v, want defaults", cfg)
	}
	if cfg.Port != 7400 || cfg.HTTPAddr != "0.0.0.0:7480" || cfg.MaxPayload != 1<<20 {
		t.Fatalf("defaults changed: %+v", cfg)
	}
}

func TestConfigPrecedenceFileEnvFlag(t *testing.T) {
	path := writeFile(t, `
port = 7500
max_payload = "2MiB"
ping_interval = "30s"
server_name = "from-file"
slow_consumer_policy = "disconnect"
max_pending = 1048576
sync = "always"
`)
	cfg, err := LoadConfig([]string{"--config", path, "--port", "7600", "--sync", "never"},
		env(map[string]string{"TERN_PORT": "7550", "TERN_SERVER_NAME": "from-env", "TERN_SYNC": "interval", "TERN_MAX_PENDING": "2MiB"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 7600 || cfg.Sync != "never" {
		t.Errorf("flag should win: port %d sync %s", cfg.Port, cfg.Sync)
	}
	if cfg.ServerName != "from-env" || cfg.MaxPending != 2<<20 {
		t.Errorf("env should beat file: name %q max_pending %d", cfg.ServerName, cfg.MaxPending)
	}
	if cfg.MaxPayload != 2<<20 || cfg.PingInterval != 30*time.Second || cfg.SlowConsumerPolicy != "disconnect" {
		t.Errorf("file values lost: %+v", cfg)
	}
	// TERN_CONFIG names the file when --config does not.
	cfg, err = LoadConfig(nil, env(map[string]string{"TERN_CONFIG": path}), &bytes.Buffer{})
	if err != nil || cfg.Port != 7500 {
		t.Fatalf("TERN_CONFIG: port %d, %v", cfg.Port, err)
	}
	// An empty value from the environment or a flag is a value: it disables HTTP.
	cfg, err = LoadConfig(nil, env(map[string]string{"TERN_HTTP": ""}), &bytes.Buffer{})
	if err != nil || cfg.HTTPAddr != "" {
		t.Fatalf("TERN_HTTP empty: %q %v", cfg.HTTPAddr, err)
	}
	cfg, err = LoadConfig([]string{"--http", "", "--store-dir="}, env(nil), &bytes.Buffer{})
	if err != nil || cfg.HTTPAddr != "" || cfg.StoreDir != "" {
		t.Fatalf("--http '': %q %q %v", cfg.HTTPAddr, cfg.StoreDir, err)
	}
}

// sample is a value other than the default for each type, and how it reads back.
func sample(t *testing.T, o OptionInfo) (in, out string) {
	switch {
	case o.Values != nil:
		for _, v := range o.Values {
			if v != DefaultConfigValue(t, o.Key) {
				return strings.ToUpper(v), v // enumerations ignore case
			}
		}
	case o.Type == "int":
		return "3", "3"
	case o.Type == "bytes":
		return "2MiB", "2MiB"
	case o.Type == "duration":
		return "1m30s", "1m30s"
	case o.Type == "string":
		return "some value", "some value"
	case o.Type == "bool":
		if DefaultConfigValue(t, o.Key) == "true" {
			return "FALSE", "false"
		}
		return "TRUE", "true"
	}
	t.Fatalf("option %s: no sample for type %s", o.Key, o.Type)
	return
}

// DefaultConfigValue is an option's default as its value prints it.
func DefaultConfigValue(t *testing.T, key string) string {
	o, ok := optionByKey(key)
	if !ok {
		t.Fatalf("no option %s", key)
	}
	c := DefaultConfig()
	return o.bind(&c).String()
}

// TestEveryOptionFromEverySource: each option is read under its file key, its
// TERN_ variable and its --flag.
func TestEveryOptionFromEverySource(t *testing.T) {
	for _, o := range Options() {
		in, want := sample(t, o)
		opt, _ := optionByKey(o.Key)
		for source, load := range map[string]func() (Config, error){
			"file": func() (Config, error) {
				return LoadConfig([]string{"--config", writeFile(t, o.Key+" = "+`"`+in+`"`+"\n")}, env(nil), &bytes.Buffer{})
			},
			"env":  func() (Config, error) { return LoadConfig(nil, env(map[string]string{o.Env: in}), &bytes.Buffer{}) },
			"flag": func() (Config, error) { return LoadConfig([]string{"--" + o.Flag, in}, env(nil), &bytes.Buffer{}) },
			"flag=": func() (Config, error) {
				return LoadConfig([]string{"--" + o.Flag + "=" + in}, env(nil), &bytes.Buffer{})
			},
			"go-style flag": func() (Config, error) { return LoadConfig([]string{"-" + o.Flag, in}, env(nil), &bytes.Buffer{}) },
		} {
			cfg, err := load()
			if err != nil {
				t.Errorf("%s from %s: %v", o.Key, source, err)
				continue
			}
			if got := opt.bind(&cfg).String(); got != want {
				t.Errorf("%s from %s: got %q, want %q", o.Key, source, got, want)
			}
		}
	}
	// Numbers in the file may be TOML numbers.
	cfg, err := LoadConfig([]string{"--config", writeFile(t, "port = 7500\nmax_payload = 2097152\nudp_mtu = 1400\n")}, env(nil), &bytes.Buffer{})
	if err != nil || cfg.Port != 7500 || cfg.MaxPayload != 2<<20 || cfg.UDPMTU != 1400 {
		t.Fatalf("TOML numbers: %v %+v", err, cfg)
	}
}

func TestConfigBadValuesNameOptionValueAndWant(t *testing.T) {
	const sizeErr = `option max_pending: "12XB" is not a byte size (want e.g. 1048576, 64KiB, 8MiB, 1GiB)`
	for _, c := range []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string
	}{
		{name: "size in file", file: `max_pending = "12XB"`, want: "config file %s: " + sizeErr},
		{name: "size in env", env: map[string]string{"TERN_MAX_PENDING": "12XB"}, want: "environment TERN_MAX_PENDING: " + sizeErr},
		{name: "size in flag", args: []string{"--max-pending", "12XB"}, want: sizeErr},
		{name: "size with =", args: []string{"--max-pending=12XB"}, want: sizeErr},
		{name: "enum in file", file: `sync = "sometimes"`, want: `config file %s: option sync: "sometimes" is not one of always, interval, never`},
		{name: "enum in env", env: map[string]string{"TERN_SLOW_CONSUMER_POLICY": "ignore"}, want: `environment TERN_SLOW_CONSUMER_POLICY: option slow_consumer_policy: "ignore" is not one of drop, disconnect`},
		{name: "enum in flag", args: []string{"--log-format", "xml"}, want: `option log_format: "xml" is not one of text, json`},
		{name: "log level", args: []string{"--log-level", "loud"}, want: `option log_level: "loud" is not one of debug, info, warn, error`},
		{name: "duration in file", file: `ping_interval = "soon"`, want: `config file %s: option ping_interval: "soon" is not a duration (want e.g. 500ms, 30s, 2m, 1h30m; not negative)`},
		{name: "duration number in file", file: `ping_interval = 30`, want: `config file %s: option ping_interval: "30" is not a duration`},
		{name: "negative duration", args: []string{"--write-timeout", "-1s"}, want: `option write_timeout: "-1s" is not a duration`},
		{name: "int in env", env: map[string]string{"TERN_MAX_CONNECTIONS": "many"}, want: `environment TERN_MAX_CONNECTIONS: option max_connections: "many" is not an integer (want 0 or more)`},
		{name: "port range", args: []string{"--port", "70000"}, want: `option port: "70000" is out of range (want -1 to 65535)`},
		{name: "port -1 where not allowed", file: `gossip_port = -1`, want: `config file %s: option gossip_port: "-1" is out of range (want 0 to 65535)`},
		{name: "array in file", file: `host = ["a", "b"]`, want: `config file %s: option host: "[a b]" is not a single value`},
		{name: "unknown key", file: "no_such_setting = 1", want: `config file %s: unknown option "no_such_setting"`},
		{name: "table in file", file: "[mqtt]\nmax_inflight = 5", want: `config file %s: unknown option "mqtt.max_inflight"`},
		{name: "dashes in file", file: `max-pending = "1MiB"`, want: `config file %s: unknown option "max-pending" (did you mean max_pending?)`},
		{name: "bad TOML", file: "port = = 1", want: `config file %s: toml: line 1`},
		{name: "missing file", args: []string{"--config", "/nonexistent/tern.toml"}, want: "config file: open /nonexistent/tern.toml: no such file or directory"},
		{name: "stray argument", args: []string{"extra"}, want: `unexpected argument "extra"`},
		{name: "unknown flag", args: []string{"--no-such-flag"}, want: "unknown flag: --no-such-flag"},
	} {
		args := c.args
		want := c.want
		if c.file != "" {
			path := writeFile(t, c.file+"\n")
			args = append([]string{"--config", path}, args...)
			want = strings.Replace(want, "%s", path, 1)
		}
		_, err := LoadConfig(args, env(c.env), &bytes.Buffer{})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: got %v\nwant %s", c.name, err, want)
		}
	}
	// Option errors are typed, whatever their source.
	_, err := LoadConfig([]string{"--max-payload", "lots"}, env(nil), &bytes.Buffer{})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Key != "max_payload" {
		t.Fatalf("not an *OptionError: %#v", err)
	}
	cfg := DefaultConfig()
	cfg.SlowConsumerPolicy = "ignore"
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "slow consumer policy") {
		t.Errorf("bad policy accepted: %v", err)
	}
}

func TestHelpListsEveryOptionWithTypeAndDefault(t *testing.T) {
	var out bytes.Buffer
	_, err := LoadConfig([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help returned %v", err)
	}
	help := out.String()
	for _, want := range []string{
		"Network:\n", "Limits:\n", "Storage:\n", "MQTT:\n", "UDP:\n", "Logging:\n", "--config file", "TERN_MAX_PENDING",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, re := range []string{
		`(?m)^  --max-pending bytes +outbound bytes .* \(default 64MiB\)$`,
		`(?m)^  --max-payload bytes +.* \(default 1MiB\)$`,
		`(?m)^  --port int +.* \(default 7400\)$`,
		`(?m)^  --sync always\|interval\|never +.* \(default interval\)$`,
		`(?m)^  --ping-interval duration +.* \(default 2m0s\)$`,
		`(?m)^  --host string +.* \(default "0.0.0.0"\)$`,
		`(?m)^  --server-name string +.* \(default the host name\)$`,
		`(?m)^  --max-subscriptions int +.* \(default 0\)$`,
		`(?m)^  --log-level debug\|info\|warn\|error +.* \(default info\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(help) {
			t.Errorf("--help has no line matching %s", re)
		}
	}
	for _, o := range Options() {
		if !strings.Contains(help, "--"+o.Flag+" "+o.Type+" ") {
			t.Errorf("--help lacks --%s %s", o.Flag, o.Type)
		}
	}
	// Groups come in their order, each option under its own.
	if strings.Index(help, "Network:") > strings.Index(help, "--port") || strings.Index(help, "Logging:") > strings.Index(help, "--log-level") ||
		strings.Index(help, "Storage:") > strings.Index(help, "--sync ") || strings.Index(help, "MQTT:") > strings.Index(help, "--mqtt-port") {
		t.Errorf("options out of their groups:\n%s", help)
	}
}

// TestOperationsDocListsEveryOption keeps the option table of docs/operations.md
// what the declarations say. TERN_UPDATE_DOCS=1 rewrites it.
func TestOperationsDocListsEveryOption(t *testing.T) {
	const path = "../../docs/operations.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- options: generated from internal/server/config.go by TestOperationsDocListsEveryOption -->\n", "<!-- end of options -->\n"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, begin, end)
	}
	want := optionsMarkdown()
	if doc[i+len(begin):j] == want {
		return
	}
	if os.Getenv("TERN_UPDATE_DOCS") != "" {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the option table differs from the declarations; run TERN_UPDATE_DOCS=1 go test -run TestOperationsDocListsEveryOption ./internal/server/", path)
}

// optionsMarkdown is the option table of docs/operations.md, one per group.
func optionsMarkdown() string {
	var b strings.Builder
	group := ""
	for _, o := range Options() {
		if o.Group != group {
			if group != "" {
				b.WriteString("\n")
			}
			group = o.Group
			b.WriteString("**" + group + "**\n\n| option | type | default | meaning |\n|---|---|---|---|\n")
		}
		typ := o.Type
		switch {
		case o.Values != nil:
			typ = "`" + strings.Join(o.Values, "` \\| `") + "`"
		case typ == "bytes":
			typ = "byte size"
		}
		b.WriteString("| `" + o.Key + "` | " + typ + " | " + o.DocDefault + " | " + o.Help + " |\n")
	}
	return b.String()
}

// configFile writes the options of cfg that differ from the defaults as a TOML
// file would give them: the encoder the configuration's round trip is checked
// against. Defaults are left out because some (anonymous's "") are no value the
// option takes.
func configFile(cfg Config) []byte {
	m := map[string]any{}
	def := DefaultConfig()
	for _, o := range options {
		if v := o.bind(&cfg).String(); v != o.bind(&def).String() {
			m[o.key] = v
		}
	}
	b, err := tomlParser{}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzConfigFile: the configuration file is bytes from outside the process. Loaded
// as `tern server --config` loads it, it gives a configuration or an error that
// names the file, never a panic; and a configuration it gives, written back,
// loads again to the same values.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("port = 7500\nmax_payload = 2097152\nudp_mtu = 1400\n"))
	f.Add([]byte("port = 7500\nmax_payload = \"2MiB\"\nping_interval = \"30s\"\nserver_name = \"from-file\"\n" +
		"slow_consumer_policy = \"disconnect\"\nmax_pending = 1048576\nsync = \"always\"\n"))
	f.Add([]byte("tls_client_auth = \"REQUIRE\"\ntls_min_version = \"1.3\"\ntls_ciphers = \"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"\n" +
		"cluster_port = 7600\njoin = \"a:7600,b:7600\"\ncluster_size = 3\nstream_replicas = 3\n"))
	every := DefaultConfig()
	for _, o := range Options() {
		if o.Values != nil {
			opt, _ := optionByKey(o.Key)
			_ = opt.bind(&every).Set(o.Values[len(o.Values)-1])
		}
	}
	every.Port, every.MaxPending, every.PingInterval, every.ServerName = 1, 3<<20, time.Minute, "n"
	f.Add(configFile(every))
	f.Add([]byte("port = = 1\n"))
	f.Add([]byte("[mqtt]\nmax_inflight = 5\n"))
	f.Add([]byte("host = [\"a\", \"b\"]\nport = 1979-05-27T07:32:00Z\n"))
	f.Add([]byte("max_pending = 1e300\nport = -0.5\n"))
	f.Add([]byte("port = 7500\nport = 7501\n"))
	dir := f.TempDir()
	load := func(t *testing.T, name string, b []byte) (Config, string, error) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig([]string{"--config", path}, env(nil), io.Discard)
		return cfg, path, err
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, path, err := load(t, "tern.toml", data)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		again, _, err := load(t, "again.toml", configFile(cfg))
		if err != nil {
			t.Fatalf("the loaded configuration written back does not load: %v", err)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed the configuration:\n%+v\n%+v", cfg, again)
		}
	})
}
