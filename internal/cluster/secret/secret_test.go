package secret

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestGenerateParses(t *testing.T) {
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate()
	if a == b {
		t.Fatal("two generated secrets are equal")
	}
	s, err := Parse(a + "\n")
	if err != nil || len(s) != GenerateLen {
		t.Fatalf("Parse(Generate()) = %d bytes, %v", len(s), err)
	}
}

func TestParse(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb, 0xff, 0x01}, 8) // 24 bytes, '+' and '/' in base64
	for _, text := range []string{
		base64.StdEncoding.EncodeToString(raw),
		base64.StdEncoding.EncodeToString(raw) + "\r\n",
		"  " + base64.URLEncoding.EncodeToString(raw) + " \n",
		base64.StdEncoding.EncodeToString(raw[:20]), // with padding
		// Wrapped as base64(1) wraps long output: decoders skip line breaks.
		base64.StdEncoding.EncodeToString(raw)[:16] + "\n" + base64.StdEncoding.EncodeToString(raw)[16:] + "\n",
	} {
		got, err := Parse(text)
		if err != nil || !bytes.Equal(got, raw[:len(got)]) || len(got) < 20 {
			t.Errorf("Parse(%q) = %x, %v", text, got, err)
		}
	}
	for text, want := range map[string]string{
		"":         "empty",
		" \n\t":    "empty",
		"hunter2!": "not padded base64",
		// Passphrases that use only base64's letters: unpadded, or with stray bits.
		"myverysecretpassphrase":                       "not padded base64",
		"correcthorsebatterystaplf=":                   "not padded base64",
		base64.RawStdEncoding.EncodeToString(raw[:20]): "not padded base64",
		base64.StdEncoding.EncodeToString(raw)[:16] + " " + base64.StdEncoding.EncodeToString(raw)[16:]: "not padded base64",
		base64.StdEncoding.EncodeToString(make([]byte, MinLen-1)):                                       "15 bytes once decoded, want at least 16",
	} {
		_, err := Parse(text)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want %q", text, err, want)
		}
	}
	if _, err := Parse(base64.StdEncoding.EncodeToString(make([]byte, MinLen))); err != nil {
		t.Errorf("a secret of MinLen bytes: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	sec, _ := Generate()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	private := write("private", sec+"\n", 0o600)
	got, err := ReadFile(private, log)
	if want, _ := Parse(sec); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile: %x, %v", got, err)
	}
	if logs.Len() != 0 {
		t.Errorf("a private file was warned about: %s", logs.String())
	}

	open := write("open", sec, 0o644)
	if _, err := ReadFile(open, log); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		if !strings.Contains(logs.String(), "readable or writable by other users") || !strings.Contains(logs.String(), open) {
			t.Errorf("no warning for a world-readable file: %q", logs.String())
		}
		if strings.Contains(logs.String(), sec) {
			t.Error("the warning quotes the secret")
		}
	}

	short := write("short", "c2hvcnQ=\n", 0o600)
	for path, want := range map[string]string{
		short:                         "short: not a cluster secret: 5 bytes once decoded",
		filepath.Join(dir, "missing"): "missing: no such file",
		dir:                           "not a regular file",
		write("big", strings.Repeat("A", MaxLen+4), 0o600):   "more than a secret",
		write("text", "correct horse battery staple", 0o600): "text: not a cluster secret: not padded base64",
	} {
		_, err := ReadFile(path, nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cluster secret file") {
			t.Errorf("ReadFile(%s): %v, want an error naming the file with %q", path, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "horse") {
			t.Errorf("the error quotes the file's content: %v", err)
		}
	}
}

// TestDerivedKeys: the keys are fixed functions of the secret (every node derives
// the same), differ from each other and from the secret. The expected values were
// computed apart from Go (HKDF-SHA256 of RFC 5869 written out with Python's hmac):
// a change here is a change of the cluster protocol, and nodes before and after it
// would not understand each other.
func TestDerivedKeys(t *testing.T) {
	s := bytes.Repeat([]byte{7}, 32)
	g, r := GossipKey(s), RouteKey(s)
	if len(g) != KeyLen || len(r) != KeyLen {
		t.Fatalf("key lengths %d, %d", len(g), len(r))
	}
	if bytes.Equal(g, r) || bytes.Equal(g, s) || bytes.Equal(r, s) {
		t.Fatal("derived keys are not distinct")
	}
	if !bytes.Equal(g, GossipKey(bytes.Clone(s))) || !bytes.Equal(r, RouteKey(bytes.Clone(s))) {
		t.Fatal("derivation is not deterministic")
	}
	if hex.EncodeToString(g) != "4ffbaa6728016617b0ceef3e60665d285e1c06223b9eff82716a639ac76ef53e" ||
		hex.EncodeToString(r) != "5e4738e051a1052c8ce847c47e1d6bae416fbf18980e758608da6c9f2e39be81" {
		t.Fatalf("derived keys changed: gossip %x, route %x", g, r)
	}
	other := bytes.Repeat([]byte{8}, 32)
	if bytes.Equal(GossipKey(other), g) || bytes.Equal(RouteKey(other), r) {
		t.Fatal("another secret derives the same keys")
	}
}

// FuzzParse: a secret file holds whatever the operator put there. Parsing it
// refuses with ErrInvalid, or gives at least MinLen bytes of which the text, but
// for the white space and line breaks it may carry, is the one base64 encoding;
// keys derive from any secret it gives.
func FuzzParse(f *testing.F) {
	raw := bytes.Repeat([]byte{0xfb, 0xff, 0x01}, 8)
	f.Add(base64.StdEncoding.EncodeToString(raw) + "\n")
	f.Add(" " + base64.URLEncoding.EncodeToString(raw) + "\r\n")
	f.Add(base64.StdEncoding.EncodeToString(raw)[:16] + "\n" + base64.StdEncoding.EncodeToString(raw)[16:])
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, GenerateLen)))
	f.Add(base64.StdEncoding.EncodeToString(make([]byte, MinLen-1)))
	f.Add(base64.RawStdEncoding.EncodeToString(raw[:20]))
	f.Add("correcthorsebatterystaplf=")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		b, err := Parse(text)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || b != nil {
				t.Fatalf("Parse(%q) = %x, %v", text, b, err)
			}
			return
		}
		if len(b) < MinLen {
			t.Fatalf("Parse(%q): %d bytes", text, len(b))
		}
		s := strings.NewReplacer("\r", "", "\n", "").Replace(strings.TrimSpace(text))
		if s != base64.StdEncoding.EncodeToString(b) && s != base64.URLEncoding.EncodeToString(b) {
			t.Fatalf("Parse(%q) = %x, not what the text encodes", text, b)
		}
		if again, err := Parse(base64.StdEncoding.EncodeToString(b)); err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip of %x: %x, %v", b, again, err)
		}
		if g, r := GossipKey(b), RouteKey(b); len(g) != KeyLen || len(r) != KeyLen || bytes.Equal(g, r) {
			t.Fatalf("derived keys %x and %x", g, r)
		}
	})
}
