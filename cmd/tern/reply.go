package main

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
)

func newReplyCmd() *cobra.Command {
	var (
		cf    clientFlags
		queue string
		count int
	)
	cmd := &cobra.Command{
		Use:   "reply <subject> <response> [options]",
		Short: "Answer requests on a subject",
		Long: `Answers every request on a subject with the response, in which {{request}}
becomes the request's payload, until interrupted or --count requests are
answered.`,
		Example: `  tern reply time.now 'it is {{request}}'
  tern reply 'calc.*' 'got {{request}}' --queue svc --count 10`,
		Args: argsBetween(2, 2, "want a subject and a response"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			response, stderr := args[1], cmd.ErrOrStderr()
			done := make(chan struct{})
			var answered atomic.Int64
			handler := func(m *tern.Msg) {
				if m.Reply == "" {
					return
				}
				if err := m.Respond([]byte(strings.ReplaceAll(response, "{{request}}", string(m.Data)))); err != nil {
					fmt.Fprintf(stderr, "respond: %v\n", err)
					return
				}
				if n := answered.Add(1); count > 0 && n == int64(count) {
					close(done)
				}
			}
			opts := []tern.SubOpt{}
			if queue != "" {
				opts = append(opts, tern.Queue(queue))
			}
			if _, err := nc.Subscribe(args[0], handler, opts...); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "answering requests on %q\n", args[0])
			select {
			case <-done:
			case <-cmd.Context().Done():
			}
			// Answer what has already arrived, make sure the answers left, then close.
			return nc.Drain()
		},
	}
	cf.register(cmd, "tern-reply")
	fs := cmd.Flags()
	fs.StringVar(&queue, "queue", "", "queue group, so several responders share the load")
	fs.IntVar(&count, "count", 0, "exit after answering this many requests (0 = until interrupted)")
	return cmd
}
