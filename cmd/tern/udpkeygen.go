package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tern-mq/tern/internal/transport/udp"
)

func newUDPKeygenCmd() *cobra.Command {
	var (
		file   string
		psk    bool
		public string
	)
	cmd := &cobra.Command{
		Use:   "udp-keygen [-o key-file] [--psk] | --public key-file",
		Short: "Make keys for encrypted UDP sessions",
		Long: `Makes the server's key pair for encrypted UDP sessions (server option
udp_key_file, client option --udp-key), or with --psk a pre-shared key
(udp_psk_file, --udp-psk-file). A key written to a file is created with mode
0600 and never overwrites one: losing a server's key means reconfiguring every
client.`,
		Example: `  tern udp-keygen -o /etc/tern/udp.key        # private key to the file; prints the public key
  tern udp-keygen --public /etc/tern/udp.key   # the public key again
  tern udp-keygen --psk -o /etc/tern/udp.psk   # a pre-shared key`,
		Args: argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return udpKeygen(cmd.OutOrStdout(), file, psk, public)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&file, "output", "o", "", "write the private key (or, with --psk, the pre-shared key) to this `file` (mode 0600) and print only the public key")
	fs.BoolVar(&psk, "psk", false, "make a pre-shared key (udp_psk_file, tern.UDPPreSharedKey) instead of a key pair")
	fs.StringVar(&public, "public", "", "print the public key of the private key in this `file`")
	return cmd
}

func udpKeygen(out io.Writer, file string, psk bool, public string) error {
	if public != "" {
		k, err := udp.ReadKeyFile(public)
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
	if file != "" {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: not overwriting a key", file)
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
		if !psk {
			fmt.Fprintln(out, k.Public())
		}
		return nil
	}
	if psk {
		fmt.Fprintln(out, k)
		return nil
	}
	fmt.Fprintf(out, "private %s\npublic  %s\n", k, k.Public())
	return nil
}
