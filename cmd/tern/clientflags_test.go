package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestHelpListsEveryOptionWithItsDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		want []string
	}{
		{"pub", []string{"--server URL", "(default $TERN_URL, else the context's, else tern://127.0.0.1:7400)", "--context context", "--header key=value", "--reply",
			"--count int", "(default 1)", "--sleep duration", "(default 0s)", "--timeout duration", "(default 2s)", "--name", "--creds"}},
		{"sub", []string{"--queue", "--filter", "--count", "--raw", "--headers", "(default true)", "--json", "(default false)"}},
		{"req", []string{"--header", "--timeout"}},
		{"reply", []string{"--queue", "--count"}},
	} {
		var out bytes.Buffer
		if err := runTern(t.Context(), &out, io.Discard, c.name, "--help"); err != nil {
			t.Fatalf("tern %s --help: %v", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("tern %s --help lacks %q:\n%s", c.name, w, out.String())
			}
		}
		// Every option line but --help's carries a default.
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "--") && strings.HasPrefix(strings.TrimSpace(l), "-") && !strings.Contains(l, "--help") && !strings.Contains(l, "(default ") {
				t.Errorf("tern %s: %q has no default", c.name, l)
			}
		}
	}
}
