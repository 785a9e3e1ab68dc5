package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tern-mq/tern/internal/cluster/secret"
)

func newClusterKeygenCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "keygen [-o secret-file]",
		Short: "Make a secret for the nodes of a cluster to share (cluster_secret_file)",
		Long: `Prints a fresh cluster secret: 32 random bytes in base64. Every node of the
cluster is given the same one in the file its cluster_secret_file option names;
then gossip between the nodes is encrypted, routes are authenticated, and a
node without the secret cannot join (docs/security.md, "Cluster security").
With -o the secret is written to the file instead, created with mode 0600; an
existing file is never overwritten.`,
		Example: `  tern cluster keygen -o /etc/tern/cluster.secret   # then copy it to every node
  tern cluster keygen > cluster.secret              # printed; mind the file's mode`,
		Args: argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return clusterKeygen(cmd.OutOrStdout(), file)
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "write the secret to this `file` (mode 0600) instead of printing it")
	return cmd
}

func clusterKeygen(out io.Writer, file string) error {
	s, err := secret.Generate()
	if err != nil {
		return err
	}
	if file == "" {
		_, err := fmt.Fprintln(out, s)
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: not overwriting a secret", file)
	}
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, s); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}
