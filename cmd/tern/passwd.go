package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/tern-mq/tern/internal/auth"
)

// scramIterations is the PBKDF2 count of the SCRAM credentials `tern passwd`
// makes: Kafka's default and RFC 7677's minimum.
const scramIterations = 4096

func newPasswdCmd() *cobra.Command {
	var (
		token bool
		cost  int
	)
	cmd := &cobra.Command{
		Use:   "passwd [--token]",
		Short: "Make a password hash or a bearer token for the users file",
		Long: `Reads a password (asked for twice on a terminal, else the first line of
standard input) and prints the users file lines that store it: a bcrypt hash for
native, MQTT, HTTP and Kafka SASL/PLAIN logins, and SCRAM-SHA-256 and -512
credentials for Kafka SASL/SCRAM. The password itself is stored nowhere.

With --token it makes a random bearer token instead, prints it once, and prints
the users file line with its hash (docs/security.md).`,
		Example: `  tern passwd                  # paste the lines into a [[users]] entry
  echo -n 's3cret' | tern passwd
  tern passwd --token`,
		Args: argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token {
				return printToken(cmd.OutOrStdout())
			}
			pw, err := readPassword(cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return printPassword(cmd.OutOrStdout(), pw, cost)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&token, "token", false, "make a random bearer token instead of hashing a password")
	fs.IntVar(&cost, "cost", bcrypt.DefaultCost, "bcrypt cost (each step doubles the time a login takes)")
	return cmd
}

func readPassword(in io.Reader, prompt io.Writer) ([]byte, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(prompt, "Password: ")
		pw, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(prompt, "Again: ")
		again, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return nil, err
		}
		if string(pw) != string(again) {
			return nil, errors.New("the passwords differ")
		}
		return checkPassword(pw)
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return checkPassword([]byte(strings.TrimRight(line, "\r\n")))
}

func checkPassword(pw []byte) ([]byte, error) {
	switch {
	case len(pw) == 0:
		return nil, errors.New("empty password")
	case len(pw) > 72:
		return nil, errors.New("password longer than 72 bytes (bcrypt's limit)")
	}
	return pw, nil
}

func printPassword(out io.Writer, pw []byte, cost int) error {
	h, err := bcrypt.GenerateFromPassword(pw, cost)
	if err != nil {
		return fmt.Errorf("bcrypt: %w", err)
	}
	fmt.Fprintf(out, "password = %q\n", h)
	for _, mech := range auth.SCRAMMechanisms {
		salt := make([]byte, 16)
		if _, err := rand.Read(salt); err != nil {
			return err
		}
		line, err := auth.FormatSCRAM(mech, string(pw), salt, scramIterations)
		if err != nil {
			return err
		}
		key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(mech, "SCRAM-"), "-", ""))
		fmt.Fprintf(out, "scram_%s = %q\n", key, line)
	}
	return nil
}

func printToken(out io.Writer) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	tok := base64.RawURLEncoding.EncodeToString(b)
	fmt.Fprintf(out, "# the token, for the client (shown only now): %s\ntokens = [%q]\n", tok, auth.TokenHash([]byte(tok)))
	return nil
}
