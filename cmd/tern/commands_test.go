package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tern-mq/tern/internal/server"
)

// runExit runs a command line as main does and returns its exit status, stdout
// and stderr.
func runExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestOptionsAfterArguments: options come before, between or after the
// arguments, in the double-dash form or the single-dash one of Go's flag package.
func TestOptionsAfterArguments(t *testing.T) {
	s := startCLIServer(t)
	for _, c := range []struct {
		sub, pub []string
		want     string
	}{
		{[]string{"sub", "sensors.temp", "--count", "1", "--raw", "--server", s.URL()},
			[]string{"pub", "sensors.temp", "21.5", "--server", s.URL()}, "21.5\n"},
		{[]string{"sub", "--server", s.URL(), "sensors.temp", "--raw", "--count=1"},
			[]string{"pub", "--server=" + s.URL(), "sensors.temp", "--", "-5"}, "-5\n"},
		{[]string{"sub", "-count", "1", "-raw", "sensors.temp", "-server", s.URL()},
			[]string{"pub", "-server", s.URL(), "-header", "a=b", "sensors.temp", "go style"}, "go style\n"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out bytes.Buffer
		var wg sync.WaitGroup
		var subErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			subErr = runTern(ctx, &out, io.Discard, c.sub...)
		}()
		waitSubs(t, s, 1)
		if err := runTern(ctx, io.Discard, io.Discard, c.pub...); err != nil {
			t.Fatalf("%v: %v", c.pub, err)
		}
		wg.Wait()
		cancel()
		if subErr != nil || out.String() != c.want {
			t.Fatalf("%v: %q, %v; want %q", c.sub, out.String(), subErr, c.want)
		}
	}
}

func TestExitStatusAndErrors(t *testing.T) {
	s := startCLIServer(t)
	for _, c := range []struct {
		args       []string
		code       int
		stdout     string
		stderrLike string
	}{
		{[]string{"version"}, 0, "tern " + version + "\n", `^$`},
		{[]string{"--version"}, 0, "tern " + version + "\n", `^$`},
		{[]string{"sub"}, 2, "", `^tern sub: want one subject\nRun 'tern sub --help' for usage.\n$`},
		{[]string{"sub", "a", "b"}, 2, "", `^tern sub: too many arguments: a b\n`},
		{[]string{"sub", "--count", "x", "a"}, 2, "", `^tern sub: invalid argument "x" for "--count" flag`},
		{[]string{"sub", "--no-such-option", "a"}, 2, "", `^tern sub: unknown flag: --no-such-option\n`},
		{[]string{"stream", "add", "X", "--max-bytes", "lots"}, 2, "", `^tern stream add: --max-bytes: "lots" is not a byte size \(want e\.g\. 1048576, 64KiB, 8MiB, 1GiB\)\n`},
		{[]string{"frobnicate"}, 2, "", `^tern: unknown command "frobnicate"\n`},
		{[]string{"strem"}, 2, "", `^tern: unknown command "strem" \(did you mean stream\?\)\n`},
		{[]string{"stream", "purg"}, 2, "", `^tern stream: unknown command "purg" \(did you mean purge\?\)\n`},
		{[]string{"stream", "frobnicate"}, 2, "", `^tern stream: unknown command "frobnicate"\n`},
		{[]string{}, 2, "", `(?s)^Tern is .*Usage:\n  tern <command>\n.*Messaging:\n`},
		{[]string{"stream"}, 2, "", `(?s)Usage:\n  tern stream <command>\n`},
		{[]string{"req", "--server", s.URL(), "nobody.home"}, 1, "", `^tern req: no responders on "nobody.home"\n$`},
		{[]string{"stream", "rm", "ORDERS", "--server", s.URL()}, 1, "", `^tern stream rm: deleting stream "ORDERS" removes its messages and consumers; add --force \(-f\) to do it\n$`},
		{[]string{"pub", "x", "--server", "tern://127.0.0.1:1", "--timeout", "100ms"}, 1, "", `^tern pub: connect to tern://127.0.0.1:1: `},
	} {
		code, stdout, stderr := runExit(t, c.args...)
		if code != c.code || stdout != c.stdout || !regexp.MustCompile(c.stderrLike).MatchString(stderr) {
			t.Errorf("tern %v: exit %d, stdout %q, stderr %q; want %d, %q, stderr like %s", c.args, code, stdout, stderr, c.code, c.stdout, c.stderrLike)
		}
	}
}

// TestHelpOnEveryCommand: --help and -h work on every command and subcommand,
// print to stdout and exit 0, with a summary, a usage line and each option with
// its default.
func TestHelpOnEveryCommand(t *testing.T) {
	var paths [][]string
	var visit func(c *cobra.Command, path []string)
	visit = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				visit(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	root := newRootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	visit(root, nil)
	if len(paths) < 30 {
		t.Fatalf("only %d commands: %v", len(paths), paths)
	}
	for _, path := range paths {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"--help", "-h"} {
			code, stdout, stderr := runExit(t, append(append([]string(nil), path...), h)...)
			name := strings.TrimSpace("tern " + strings.Join(path, " "))
			if code != 0 || stderr != "" {
				t.Errorf("%s %s: exit %d, stderr %q", name, h, code, stderr)
				continue
			}
			summary := cmd.Long
			if summary == "" {
				summary = cmd.Short
			}
			if !strings.HasPrefix(stdout, strings.TrimSpace(strings.SplitN(summary, "\n", 2)[0])) {
				t.Errorf("%s %s does not start with its summary %q:\n%s", name, h, summary, stdout)
			}
			if !strings.Contains(stdout, "Usage:\n  "+name) {
				t.Errorf("%s %s has no usage line:\n%s", name, h, stdout)
			}
			if !strings.Contains(stdout, "-h, --help") {
				t.Errorf("%s %s does not list --help:\n%s", name, h, stdout)
			}
			for _, l := range strings.Split(stdout, "\n") {
				if regexp.MustCompile(`^\s+(-\w, )?--[a-z]`).MatchString(l) && !strings.Contains(l, "--help") && !strings.Contains(l, "--version") && !strings.Contains(l, "(default ") {
					t.Errorf("%s %s: option without a default: %q", name, h, l)
				}
			}
		}
	}
	// tern help <command> is the same as tern <command> --help.
	_, viaHelp, _ := runExit(t, "help", "stream", "add")
	_, viaFlag, _ := runExit(t, "stream", "add", "--help")
	if viaHelp != viaFlag {
		t.Errorf("tern help stream add differs from tern stream add --help")
	}
}

func TestServerHelpShowsTypedDefaultsByGroup(t *testing.T) {
	code, help, _ := runExit(t, "server", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, re := range []string{
		`(?m)^Usage:\n  tern server \[options\]$`,
		`(?m)^Network:\n  --host string +.*\(default "0\.0\.0\.0"\)$`,
		`(?m)^  --max-pending bytes +outbound bytes .*\(default 64MiB\)$`,
		`(?m)^  --sync always\|interval\|never +.*\(default interval\)$`,
		`(?m)^  --slow-consumer-policy drop\|disconnect +.*\(default drop\)$`,
		`(?m)^  --ping-interval duration +.*\(default 2m0s\)$`,
		`(?m)^  --udp-port int +.*\(default 0\)$`,
		`(?m)^  --log-format text\|json +.*\(default text\)$`,
		`(?m)^  --config file +`,
		`(?m)^  -h, --help +`,
		`(?m)^Limits:$`, `(?m)^Storage:$`, `(?m)^MQTT:$`, `(?m)^UDP:$`, `(?m)^Logging:$`,
		`TERN_MAX_PENDING`,
	} {
		if !regexp.MustCompile(re).MatchString(help) {
			t.Errorf("tern server --help has nothing matching %s", re)
		}
	}
	for _, o := range server.Options() {
		if !strings.Contains(help, "--"+o.Flag+" "+o.Type) {
			t.Errorf("tern server --help lacks --%s %s", o.Flag, o.Type)
		}
	}
}

// serverConfig runs tern server with args and returns the configuration it would
// have run with.
func serverConfig(t *testing.T, args ...string) (server.Config, int, string) {
	t.Helper()
	var got server.Config
	prev := serve
	serve = func(_ context.Context, cfg server.Config) error { got = cfg; return nil }
	defer func() { serve = prev }()
	code, _, stderr := runExit(t, append([]string{"server"}, args...)...)
	return got, code, stderr
}

func TestServerConfigSourcesAndErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tern.toml")
	if err := os.WriteFile(path, []byte("port = 7500\nmax_pending = \"1MiB\"\nserver_name = \"file\"\nsync = \"always\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TERN_SERVER_NAME", "env")
	t.Setenv("TERN_SYNC", "never")
	cfg, code, stderr := serverConfig(t, "--config", path, "--sync", "interval")
	if code != 0 || cfg.Port != 7500 || cfg.MaxPending != 1<<20 || cfg.ServerName != "env" || cfg.Sync != "interval" {
		t.Fatalf("file < env < flag: exit %d %s %+v", code, stderr, cfg)
	}
	t.Setenv("TERN_CONFIG", path)
	if cfg, _, _ := serverConfig(t); cfg.Port != 7500 || cfg.Sync != "never" {
		t.Fatalf("TERN_CONFIG: %+v", cfg)
	}
	os.Unsetenv("TERN_CONFIG")
	os.Unsetenv("TERN_SYNC")

	const want = `option max_pending: "12XB" is not a byte size (want e.g. 1048576, 64KiB, 8MiB, 1GiB)`
	bad := filepath.Join(t.TempDir(), "bad.toml")
	_ = os.WriteFile(bad, []byte("max_pending = \"12XB\"\n"), 0o644)
	if _, code, stderr := serverConfig(t, "--max-pending", "12XB"); code != 2 || stderr != "tern server: "+want+"\nRun 'tern server --help' for usage.\n" {
		t.Errorf("flag: exit %d %q", code, stderr)
	}
	if _, code, stderr := serverConfig(t, "--config", bad); code != 1 || stderr != "tern server: config file "+bad+": "+want+"\n" {
		t.Errorf("file: exit %d %q", code, stderr)
	}
	t.Setenv("TERN_MAX_PENDING", "12XB")
	if _, code, stderr := serverConfig(t); code != 1 || stderr != "tern server: environment TERN_MAX_PENDING: "+want+"\n" {
		t.Errorf("env: exit %d %q", code, stderr)
	}
	os.Unsetenv("TERN_MAX_PENDING")
	unknown := filepath.Join(t.TempDir(), "unknown.toml")
	_ = os.WriteFile(unknown, []byte("max_pendin = 1\n"), 0o644)
	if _, code, stderr := serverConfig(t, "--config", unknown); code != 1 || !strings.Contains(stderr, `unknown option "max_pendin"`) {
		t.Errorf("unknown key: exit %d %q", code, stderr)
	}
	// Go flag's single-dash form still works for the server's options.
	if cfg, code, stderr := serverConfig(t, "-port", "7600", "-http="); code != 0 || cfg.Port != 7600 || cfg.HTTPAddr != "" {
		t.Errorf("-port 7600 -http=: exit %d %s %+v", code, stderr, cfg)
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "# bash completion V2 for tern",
		"zsh":        "#compdef tern",
		"fish":       "# fish completion for tern",
		"powershell": "# powershell completion for tern",
	} {
		code, out, stderr := runExit(t, "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d %q, output lacks %q", shell, code, stderr, want)
		}
	}
	_, out, _ := runExit(t, "completion", "bash")
	if !strings.Contains(out, "__start_tern") || !strings.Contains(out, "complete -o default -F __start_tern tern") {
		t.Errorf("bash completion does not register for tern:\n%.400s", out)
	}
	// The shells ask the binary: commands, enumerations and option names.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "st"}, []string{"stream"}},
		{[]string{"__complete", "stream", ""}, []string{"add", "ls", "info", "rm", "purge", "get"}},
		{[]string{"__complete", "server", "--sync", ""}, []string{"always", "interval", "never"}},
		{[]string{"__complete", "stream", "add", "X", "--retention", ""}, []string{"limits", "workqueue", "interest"}},
		{[]string{"__complete", "sub", "--q"}, []string{"--queue"}},
	} {
		_, out, _ := runExit(t, c.args...)
		for _, w := range c.want {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w) + `(\t|$)`).MatchString(out) {
				t.Errorf("%v: %q not offered:\n%s", c.args, w, out)
			}
		}
	}
}
