package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
)

// jsonMsg is one line of `tern sub --json`.
type jsonMsg struct {
	Subject string      `json:"subject"`
	Reply   string      `json:"reply"`
	Headers tern.Header `json:"headers"`
	Data    string      `json:"data"`
	Size    int         `json:"size"`
}

func newSubCmd() *cobra.Command {
	var (
		cf      clientFlags
		queue   string
		filter  string
		count   int
		raw     bool
		headers bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "sub <subject> [options]",
		Short: "Subscribe and print messages",
		Long: `Subscribes to a subject, wildcards allowed ('*' one token, '>' the rest), and
prints each message until interrupted or --count messages have arrived.`,
		Example: `  tern sub 'sensors.>'
  tern sub 'jobs.*' --queue workers
  tern sub 'sensors.>' --filter 'hdr.sender == "s1" && size <= 512'
  tern sub orders.new --count 1 --json`,
		Args: argsBetween(1, 1, "want one subject"),
		RunE: func(cmd *cobra.Command, args []string) error {
			nc, err := cf.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			opts := []tern.SubOpt{}
			if filter != "" {
				opts = append(opts, tern.Filter(filter))
			}
			if queue != "" {
				opts = append(opts, tern.Queue(queue))
			}
			sub, err := nc.SubscribeSync(args[0], opts...)
			if err != nil {
				return err
			}
			if count > 0 {
				// The server stops at count too, so a queue group's other members get the rest.
				if err := sub.AutoUnsubscribe(count); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "listening on %q\n", args[0])
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			for n := 1; count <= 0 || n <= count; n++ {
				m, err := sub.NextMsgContext(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return nil // interrupted
					}
					return err
				}
				switch {
				case asJSON:
					h := m.Header
					if h == nil {
						h = tern.Header{}
					}
					if err := enc.Encode(jsonMsg{Subject: m.Subject, Reply: m.Reply, Headers: h, Data: string(m.Data), Size: len(m.Data)}); err != nil {
						return err
					}
				case raw:
					fmt.Fprintf(out, "%s\n", m.Data)
				default:
					fmt.Fprintf(out, "[#%d] %s (%d B)", n, m.Subject, len(m.Data))
					if m.Reply != "" {
						fmt.Fprintf(out, " reply %s", m.Reply)
					}
					fmt.Fprintln(out)
					if headers && len(m.Header) > 0 {
						keys := make([]string, 0, len(m.Header))
						for k := range m.Header {
							keys = append(keys, k)
						}
						sort.Strings(keys)
						for _, k := range keys {
							for _, v := range m.Header[k] {
								fmt.Fprintf(out, "  %s: %s\n", k, v)
							}
						}
					}
					fmt.Fprintf(out, "%s\n\n", m.Data)
				}
			}
			return nil
		},
	}
	cf.register(cmd, "tern-sub")
	fs := cmd.Flags()
	fs.StringVar(&queue, "queue", "", "join this queue group")
	fs.StringVar(&filter, "filter", "", `receiver-side filter, e.g. 'hdr.sender == "s1" && size <= 512'`)
	fs.IntVar(&count, "count", 0, "exit after this many messages (0 = run until interrupted)")
	fs.BoolVar(&raw, "raw", false, "print only payloads")
	fs.BoolVar(&headers, "headers", true, "print headers")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object per message")
	return cmd
}
