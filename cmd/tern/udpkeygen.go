package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tern-mq/tern/internal/transport/udp"
)

func init() {
	register(command{name: "udp-keygen", summary: "make keys for encrypted UDP sessions",
		run: func(_ context.Context, args []string) error { return runUDPKeygen(args, os.Stdout) }})
}

// runUDPKeygen makes the server's key pair (or a pre-shared key). A key written to
// a file is created with mode 0600 and never overwrites one: losing a server's key
// means reconfiguring every client.
func runUDPKeygen(args []string, out io.Writer) error {
	fs := newFlagSet("udp-keygen", "udp-keygen [-o key-file] [-psk] | -public key-file")
	file := fs.String("o", "", "write the private key (or, with -psk, the pre-shared key) to this `file` (mode 0600) and print only the public key")
	psk := fs.Bool("psk", false, "make a pre-shared key (udp_psk_file, tern.UDPPreSharedKey) instead of a key pair")
	public := fs.String("public", "", "print the public key of the private key in this `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *public != "" {
		k, err := udp.ReadKeyFile(*public)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, k.Public())
		return nil
	}
	k, err := udp.GenerateKey()
	if err != nil {
		return err
	}
	if *file != "" {
		f, err := os.OpenFile(*file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: not overwriting a key", *file)
		}
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(f, k); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if !*psk {
			fmt.Fprintln(out, k.Public())
		}
		return nil
	}
	if *psk {
		fmt.Fprintln(out, k)
		return nil
	}
	fmt.Fprintf(out, "private %s\npublic  %s\n", k, k.Public())
	return nil
}
