package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/server"
	"github.com/tern-mq/tern/internal/server/servertest"
)

// TestPasswdLinesLogIn: what `tern passwd` prints, pasted into a users file,
// lets the user in with that password or token and no other.
func TestPasswdLinesLogIn(t *testing.T) {
	var pwLines, tokLines bytes.Buffer
	if _, err := execute(context.Background(), []string{"passwd", "--cost", "4"}, strings.NewReader("s3cret word\n"), &pwLines, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(context.Background(), []string{"passwd", "--token"}, nil, &tokLines, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"password = \"$2a$04$", "scram_sha256 = \"4096:", "scram_sha512 = \"4096:"} {
		if !strings.Contains(pwLines.String(), key) {
			t.Errorf("passwd output lacks %q:\n%s", key, pwLines.String())
		}
	}
	m := regexp.MustCompile(`shown only now\): (\S+)`).FindStringSubmatch(tokLines.String())
	if m == nil {
		t.Fatalf("no token in %q", tokLines.String())
	}
	token := m[1]
	tokenLine := tokLines.String()[strings.Index(tokLines.String(), "tokens = "):]
	if strings.Contains(tokenLine, token) {
		t.Fatal("the users file line holds the token itself")
	}
	users := "[[users]]\nname = \"u\"\n" + pwLines.String() + "\n[[users]]\nname = \"t\"\n" + tokenLine
	file := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(file, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, func(c *server.Config) { c.UsersFile = file })
	url := "tern://" + s.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for creds, ok := range map[string]bool{"u:s3cret word": true, token: true, "u:s3cret": false, token + "x": false, "": false} {
		err := runPub(ctx, []string{"--server", url, "--creds", creds, "x", "hello"})
		if (err == nil) != ok {
			t.Errorf("pub with credentials %q: %v, want success %v", creds, err, ok)
		}
	}
}
