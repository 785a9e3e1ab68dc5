package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// kcat runs the kcat client (Debian's, librdkafka inside) against addr with the
// given arguments and input, and returns its output.
func kcat(t *testing.T, addr, input string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (scripts/deps.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-b", addr}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestKcatRoundTrip: `kcat -P -t T` then `kcat -C -t T -e` gives back the lines,
// on an auto-created topic, with each compression codec kcat has.
func TestKcatRoundTrip(t *testing.T) {
	_, addr := startTern(t, nil)
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			topic := "kcat-" + codec
			var lines []string
			for i := range 50 {
				lines = append(lines, fmt.Sprintf("line %d through %s", i, codec))
			}
			kcat(t, addr, strings.Join(lines, "\n")+"\n", "-P", "-t", topic, "-z", codec)
			out := kcat(t, addr, "", "-C", "-t", topic, "-e", "-q")
			if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, lines) {
				t.Fatalf("consumed %q, want %q", got, lines)
			}
		})
	}
}

// TestKcatKeysAndOffsets: keys (-K) survive the round trip, a consumer from an
// offset (-o) starts there, and kcat's metadata listing (-L) shows the topic with
// this node as leader.
func TestKcatKeysAndOffsets(t *testing.T) {
	_, addr := startTern(t, nil)
	kcat(t, addr, "a:1\nb:2\nc:3\n", "-P", "-t", "keyed", "-K:")
	out := kcat(t, addr, "", "-C", "-t", "keyed", "-e", "-q", "-o", "1", "-f", "%k=%s@%o\n")
	if out != "b=2@1\nc=3@2\n" {
		t.Fatalf("consumed %q", out)
	}
	meta := kcat(t, addr, "", "-L", "-t", "keyed")
	if !strings.Contains(meta, `topic "keyed" with 1 partitions`) || !strings.Contains(meta, "leader 0") {
		t.Fatalf("metadata:\n%s", meta)
	}
}

// TestKcatGroup: `kcat -G group T` (librdkafka's balanced consumer) reads a topic
// from its start and commits; run again, it reads only what came since.
func TestKcatGroup(t *testing.T) {
	_, addr := startTern(t, fastGroups)
	kcat(t, addr, "one\ntwo\nthree\n", "-P", "-t", "kg")
	group := func() string {
		return kcat(t, addr, "", "-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true",
			"-e", "-q", "-f", "%s\n", "kg")
	}
	if out := group(); out != "one\ntwo\nthree\n" {
		t.Fatalf("first run consumed %q", out)
	}
	kcat(t, addr, "four\n", "-P", "-t", "kg")
	if out := group(); out != "four\n" {
		t.Fatalf("second run consumed %q, want only the new record", out)
	}
}
