package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestHelpListsEveryOptionWithItsDefault(t *testing.T) {
	t.Setenv("TERN_URL", "")
	for _, c := range []struct {
		name string
		want []string
	}{
		{"pub", []string{"--server URL", `(default "tern://127.0.0.1:7400")`, "--header key=value", "--reply", "--count int", "(default 1)", "--sleep duration", "(default 0s)", "--timeout duration", "(default 2s)", "--name", "--creds"}},
		{"sub", []string{"--queue", "--filter", "--count", "--raw", "--headers", "(default true)", "--json", "(default false)"}},
		{"req", []string{"--header", "--timeout"}},
		{"reply", []string{"--queue", "--count"}},
	} {
		var out bytes.Buffer
		captureUsage(t, c.name, &out)
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("tern %s --help lacks %q:\n%s", c.name, w, out.String())
			}
		}
		// Every option line carries a default.
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "  --") && (i+1 >= len(lines) || !strings.Contains(lines[i+1], "(default ")) {
				t.Errorf("tern %s: %q has no default", c.name, l)
			}
		}
	}
}

// captureUsage runs a subcommand with --help and its usage written to out.
func captureUsage(t *testing.T, name string, out *bytes.Buffer) {
	t.Helper()
	prev := flagOutput
	flagOutput = out
	defer func() { flagOutput = prev }()
	err := commands[name].run(t.Context(), []string{"--help"})
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("tern %s --help: %v", name, err)
	}
}
