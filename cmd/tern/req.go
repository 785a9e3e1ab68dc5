package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
)

func newReqCmd() *cobra.Command {
	var (
		cf  clientFlags
		hdr headerFlag
	)
	cmd := &cobra.Command{
		Use:   "req <subject> [payload] [options]",
		Short: "Send a request and print the reply",
		Long: `Sends a request and prints the first reply. The payload is the second
argument ('-' reads standard input). Exits with status 1 when nobody answers
within --timeout or no one listens on the subject.`,
		Example: `  tern req time.now noon
  tern req calc.add 1+1 --header a=b --timeout 5s
  echo '{"q":1}' | tern req search -`,
		Args: argsBetween(1, 2, "want a subject and an optional payload"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var payload []byte
			if len(args) == 2 {
				payload = []byte(args[1])
			}
			if len(args) == 2 && args[1] == "-" {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				payload = b
			}
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			rctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			r, err := nc.RequestMsg(rctx, &tern.Msg{Subject: args[0], Header: hdr.h, Data: payload})
			switch {
			case errors.Is(err, tern.ErrNoResponders):
				return fmt.Errorf("no responders on %q", args[0])
			case errors.Is(err, tern.ErrTimeout):
				return fmt.Errorf("no reply on %q within %s", args[0], cf.timeout)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", r.Data)
			return nil
		},
	}
	cf.register(cmd, "tern-req")
	cmd.Flags().Var(&hdr, "header", "header `key=value` (repeatable)")
	return cmd
}
