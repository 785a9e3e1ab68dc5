package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// ternOK runs a command line that must succeed and returns its output.
func ternOK(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runExit(t, args...)
	if code != 0 {
		t.Fatalf("tern %v: exit %d: %s", args, code, stderr)
	}
	return stdout
}

func TestContextCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if out := ternOK(t, "context", "ls"); !strings.HasPrefix(out, "No contexts") {
		t.Fatalf("ls of nothing: %q", out)
	}
	if _, _, err := contextFor(""); err != nil {
		t.Fatalf("no selected context should be no error: %v", err)
	}

	out := ternOK(t, "context", "add", "local", "--server", "tern://127.0.0.1:7400", "--description", "my laptop")
	if out != "Context local created (server tern://127.0.0.1:7400)\n" {
		t.Fatalf("add: %q", out)
	}
	path := filepath.Join(dir, "tern", "context", "local.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("context file: %v %v", fi, err)
	}
	var saved ternContext
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &saved); err != nil || saved.Server != "tern://127.0.0.1:7400" || saved.Description != "my laptop" {
		t.Fatalf("saved %s: %v %+v", b, err, saved)
	}
	// Adding again changes only what is given; a relative PSK file becomes absolute.
	wd, _ := os.Getwd()
	out = ternOK(t, "context", "add", "local", "--creds", "s3cret", "--udp-psk-file", "psk.key")
	if out != "Context local updated (server tern://127.0.0.1:7400)\n" {
		t.Fatalf("add again: %q", out)
	}
	ternOK(t, "context", "add", "--server", "udp://10.0.0.1:7400", "--udp-key", "abc", "edge", "--select")
	ternOK(t, "context", "add", "other", "--server", "tern://127.0.0.1:1")

	out = ternOK(t, "context", "ls")
	for _, re := range []string{`^  NAME\s+SERVER\s+DESCRIPTION$`, `^\* edge\s+udp://10\.0\.0\.1:7400\s*$`, `^  local\s+tern://127\.0\.0\.1:7400\s+my laptop$`, `^  other\s+tern://127\.0\.0\.1:1\s*$`} {
		if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
			t.Errorf("ls lacks %s:\n%s", re, out)
		}
	}
	if out := ternOK(t, "context", "select", "local"); out != "Context local selected\n" {
		t.Fatalf("select: %q", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "tern", "context.txt")); string(b) != "local\n" {
		t.Fatalf("context.txt: %q", b)
	}
	if out := ternOK(t, "context", "ls"); !regexp.MustCompile(`(?m)^\* local `).MatchString(out) || strings.Contains(out, "* edge") {
		t.Fatalf("ls after select:\n%s", out)
	}
	out = ternOK(t, "context", "show")
	for _, re := range []string{`^Context local \(selected\)$`, `^  description:\s+my laptop$`, `^  server:\s+tern://127\.0\.0\.1:7400$`,
		`^  creds:\s+set \(not shown\)$`, `^  udp psk file:\s+` + regexp.QuoteMeta(filepath.Join(wd, "psk.key")) + `$`, `^  file:\s+` + regexp.QuoteMeta(path) + `$`} {
		if !regexp.MustCompile(`(?m)` + re).MatchString(out) {
			t.Errorf("show lacks %s:\n%s", re, out)
		}
	}
	if out := ternOK(t, "context", "show", "edge"); !strings.Contains(out, "Context edge\n") || !regexp.MustCompile(`(?m)^  udp key:\s+abc$`).MatchString(out) {
		t.Errorf("show edge:\n%s", out)
	}
	// The shells complete context names.
	if _, out, _ := runExit(t, "__complete", "context", "select", ""); !strings.Contains(out, "edge\nlocal\nother\n") {
		t.Errorf("completion of names: %q", out)
	}

	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"context", "add", "new"}, 2, "tern context add: a new context needs --server\n"},
		{[]string{"context", "add", "../evil", "--server", "x"}, 2, `tern context add: context name "../evil": want up to 64 letters`},
		{[]string{"context", "add", "a/b", "--server", "x"}, 2, `context name "a/b"`},
		{[]string{"context", "add", ".hidden", "--server", "x"}, 2, `context name ".hidden"`},
		{[]string{"context", "select", "nope"}, 1, "tern context select: context \"nope\": no such context (see tern context ls)\n"},
		{[]string{"context", "show", "nope"}, 1, `context "nope": no such context`},
		{[]string{"context", "rm", "nope"}, 1, "tern context rm: context \"nope\": no such context\n"},
		{[]string{"context", "select"}, 2, "tern context select: want a context name\n"},
		{[]string{"context", "frob"}, 2, `tern context: unknown command "frob"`},
	} {
		code, _, stderr := runExit(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.stderr) {
			t.Errorf("tern %v: exit %d %q, want %d %q", c.args, code, stderr, c.code, c.stderr)
		}
	}

	out = ternOK(t, "context", "rm", "local")
	if out != "Context local deleted\nNo context is selected now\n" {
		t.Fatalf("rm selected: %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "tern", "context.txt")); !os.IsNotExist(err) {
		t.Fatalf("selection kept after rm: %v", err)
	}
	if out := ternOK(t, "context", "rm", "other"); out != "Context other deleted\n" {
		t.Fatalf("rm: %q", out)
	}
	if code, _, stderr := runExit(t, "context", "show"); code != 1 || !strings.Contains(stderr, "no context is selected") {
		t.Fatalf("show with none selected: %d %q", code, stderr)
	}

	// Without XDG_CONFIG_HOME the contexts live in ~/.config/tern.
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", home)
	ternOK(t, "context", "add", "h", "--server", "tern://h:1")
	if _, err := os.Stat(filepath.Join(home, ".config", "tern", "context", "h.json")); err != nil {
		t.Fatal(err)
	}
}

// TestClientTakesServerFromContext: --server, else TERN_URL, else --context,
// else the selected context, else the default.
func TestClientTakesServerFromContext(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s := startCLIServer(t)
	dead := "tern://127.0.0.1:1"
	ternOK(t, "context", "add", "good", "--server", s.URL(), "--select")
	ternOK(t, "context", "add", "bad", "--server", dead)

	// sub and pub with no --server reach the selected context's server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	var wg sync.WaitGroup
	var subErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		subErr = runTern(ctx, &out, io.Discard, "sub", "ctx.test", "--count", "1", "--raw")
	}()
	waitSubs(t, s, 1)
	ternOK(t, "pub", "ctx.test", "via the selected context")
	wg.Wait()
	if subErr != nil || out.String() != "via the selected context\n" {
		t.Fatalf("sub: %q %v", out.String(), subErr)
	}
	ternOK(t, "stream", "ls")
	if out := ternOK(t, "bench", "--msgs", "10", "--size", "16"); !strings.Contains(out, "/s") {
		t.Fatalf("bench with the selected context: %q", out)
	}

	for _, c := range []struct {
		env  string // TERN_URL
		args []string
		want string // "" = reaches the server; else the dead one's address in the error
	}{
		{"", []string{"--context", "bad"}, dead},
		{"", []string{"--context", "bad", "--server", s.URL()}, ""},
		{dead, nil, dead},
		{dead, []string{"--server", s.URL()}, ""},
		{s.URL(), []string{"--context", "bad"}, ""},
	} {
		t.Setenv("TERN_URL", c.env)
		args := append([]string{"req", "no.one", "--timeout", "500ms"}, c.args...)
		code, _, stderr := runExit(t, args...)
		switch {
		case c.want == "" && !strings.Contains(stderr, "no responders"):
			t.Errorf("TERN_URL=%q tern %v did not reach the server: %d %q", c.env, args, code, stderr)
		case c.want != "" && !strings.Contains(stderr, "connect to "+c.want):
			t.Errorf("TERN_URL=%q tern %v did not go to %s: %d %q", c.env, args, c.want, code, stderr)
		}
	}
	t.Setenv("TERN_URL", "")

	// The context's client options are used too.
	ternOK(t, "context", "add", "keyed", "--server", s.URL(), "--udp-key", "not-a-key")
	if code, _, stderr := runExit(t, "pub", "x", "y", "--context", "keyed"); code != 1 || !strings.Contains(stderr, "--udp-key") {
		t.Errorf("the context's udp key was not used: %d %q", code, stderr)
	}
	// A named or selected context that is gone is an error, not a silent default.
	if code, _, stderr := runExit(t, "pub", "x", "y", "--context", "gone"); code != 1 || !strings.Contains(stderr, `context "gone": no such context`) {
		t.Errorf("--context gone: %d %q", code, stderr)
	}
	ternOK(t, "context", "select", "bad")
	os.Remove(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "tern", "context", "bad.json"))
	if code, _, stderr := runExit(t, "pub", "x", "y"); code != 1 || !strings.Contains(stderr, `selected context "bad": no such context`) {
		t.Errorf("selected context gone: %d %q", code, stderr)
	}
}
