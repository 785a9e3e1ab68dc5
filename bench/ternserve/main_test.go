package main

import (
	"slices"
	"testing"
)

func TestSplitProfile(t *testing.T) {
	for _, c := range []struct {
		args []string
		path string
		rest []string
	}{
		{[]string{"--cpuprofile", "a.prof", "--port", "1"}, "a.prof", []string{"--port", "1"}},
		{[]string{"--host", "h", "-cpuprofile=b.prof"}, "b.prof", []string{"--host", "h"}},
		{[]string{"--http", ""}, "", []string{"--http", ""}},
	} {
		path, rest, err := splitProfile(c.args)
		if err != nil || path != c.path || !slices.Equal(rest, c.rest) {
			t.Errorf("splitProfile(%q) = %q, %q, %v; want %q, %q", c.args, path, rest, err, c.path, c.rest)
		}
	}
	if _, _, err := splitProfile([]string{"--cpuprofile"}); err == nil {
		t.Error("--cpuprofile without a file was accepted")
	}
}
