package cliflags

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "1KiB": 1024, "1k": 1024, "1.5MiB": 3 << 19,
		"1GiB": 1 << 30, "2G": 2 << 30, "10MB": 10e6, "1 GB": 1e9, "512B": 512, "64mib": 64 << 20, "1TiB": 1 << 40} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1XB", "-1", "1e30GiB", "NaN", "Inf"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", in)
		}
	}
	_, err := ParseByteSize("12XB")
	if err == nil || err.Error() != `"12XB" is not a byte size (want e.g. 1048576, 64KiB, 8MiB, 1GiB)` {
		t.Errorf("error %v", err)
	}
	for n, want := range map[int64]string{0: "0", 1200: "1200", 1 << 20: "1MiB", 64 << 20: "64MiB", 3 << 30: "3GiB", 1536: "1536"} {
		if got := FormatByteSize(n); got != want {
			t.Errorf("FormatByteSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseByteSize(FormatByteSize(n)); err != nil || back != n {
			t.Errorf("%d does not read back: %d %v", n, back, err)
		}
	}
}

func TestValues(t *testing.T) {
	var (
		size int
		e    = "b"
		n    int
		d    time.Duration
	)
	bs := NewByteSize(&size)
	if err := bs.Set("2KiB"); err != nil || size != 2048 || bs.String() != "2KiB" || bs.Type() != "bytes" {
		t.Errorf("byte size: %d %v %s", size, err, bs)
	}
	en := NewEnum(&e, "a", "b", "c")
	if en.Type() != "a|b|c" || en.String() != "b" {
		t.Errorf("enum %s %s", en.Type(), en)
	}
	if err := en.Set("C"); err != nil || e != "c" {
		t.Errorf("enum set C: %v %q", err, e)
	}
	if err := en.Set("d"); err == nil || err.Error() != `"d" is not one of a, b, c` {
		t.Errorf("enum set d: %v", err)
	}
	in := NewInt(&n, -1, 10)
	if err := in.Set("11"); err == nil || err.Error() != `"11" is out of range (want -1 to 10)` {
		t.Errorf("int 11: %v", err)
	}
	if err := in.Set("-1"); err != nil || n != -1 {
		t.Errorf("int -1: %v %d", err, n)
	}
	du := NewDuration(&d)
	if err := du.Set("1m30s"); err != nil || d != 90*time.Second || du.String() != "1m30s" {
		t.Errorf("duration: %v %v", err, d)
	}
	if err := du.Set("-1s"); err == nil {
		t.Error("negative duration accepted")
	}
}

func TestGoStyleArgs(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Int("count", 0, "")
	fs.Bool("psk", false, "")
	fs.StringP("output", "o", "", "")
	fs.BoolP("force", "f", false, "")
	fs.Int("port", 0, "")
	for in, want := range map[string]string{
		"-count 5 subj":              "--count 5 subj",
		"-count=5 -psk -o file":      "--count=5 --psk -o file",
		"--port -1 -f":               "--port -1 -f",
		"-o -count":                  "-o -count", // -count is -o's value
		"--output -psk x":            "--output -psk x",
		"subj -- -count":             "subj -- -count",
		"-unknown -1 -":              "-unknown -1 -",
		"-psk=true --count=-1 -port": "--psk=true --count=-1 --port",
	} {
		if got := strings.Join(GoStyleArgs(fs, strings.Fields(in)), " "); got != want {
			t.Errorf("GoStyleArgs(%q) = %q, want %q", in, got, want)
		}
	}
}
