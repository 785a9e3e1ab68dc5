// Package authtest writes a users file with known users, for the tests of every
// protocol's authentication and permissions.
package authtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/tern-mq/tern/internal/auth"
)

// The users of File. Alice may publish under "sensors." (not "sensors.secret")
// and subscribe under "cmd." and "_INBOX."; Bob logs in with a token and may
// subscribe to anything but "private."; Carol is identified by her client
// certificate (subject CarolSubject) and may publish under "orders.", and
// manage streams; Root may do anything.
const (
	Alice, AlicePassword = "alice", "alice-pw"
	Bob, BobToken        = "bob", "bob-token-0123456789"
	Carol, CarolSubject  = "carol", "CN=carol,O=Tern Test"
	Root, RootPassword   = "root", "root-pw"
)

// File writes the users file into a temporary directory and returns its path.
// Hashes use bcrypt's lowest cost, to keep tests fast.
func File(t testing.TB) string {
	t.Helper()
	hash := func(pw string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	scram := func(mech, pw string) string {
		s, err := auth.FormatSCRAM(mech, pw, []byte("authtest-salt-16"), 4096)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	data := `
[[groups]]
name = "devices"
publish = { allow = ["sensors.>"], deny = ["sensors.secret"] }
subscribe = { allow = ["cmd.>", "_INBOX.>"] }

[[users]]
name = "` + Alice + `"
password = "` + hash(AlicePassword) + `"
scram_sha256 = "` + scram(auth.SCRAMSHA256, AlicePassword) + `"
scram_sha512 = "` + scram(auth.SCRAMSHA512, AlicePassword) + `"
groups = ["devices"]

[[users]]
name = "` + Bob + `"
tokens = ["` + auth.TokenHash([]byte(BobToken)) + `"]
subscribe = { allow = [">"], deny = ["private.>"] }

[[users]]
name = "` + Carol + `"
cert_subject = "` + CarolSubject + `"
publish = { allow = ["orders.>"] }
admin = true

[[users]]
name = "` + Root + `"
password = "` + hash(RootPassword) + `"
scram_sha256 = "` + scram(auth.SCRAMSHA256, RootPassword) + `"
scram_sha512 = "` + scram(auth.SCRAMSHA512, RootPassword) + `"
admin = true
monitor = true
`
	p := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Password is the password of the users Users writes.
const Password = "pw"

// Users writes the users file format, whose %[1]q verbs stand for the bcrypt
// hash of Password, into a temporary directory and returns its path.
func Users(t testing.TB, format string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(format, h)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ReloadableUsers is Users for a test that changes the file while the server
// runs: write writes another format to the same path, its %[1]q verbs the same
// hash as before, so that a login with Password made before a reload still
// holds after it (a password hashed again is a password changed).
func ReloadableUsers(t testing.TB, format string) (path string, write func(format string)) {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "users.toml")
	write = func(format string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(format, h)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(format)
	return path, write
}
