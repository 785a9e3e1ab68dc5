package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	tern "github.com/tern-mq/tern/client/go"
)

func init() {
	register(command{name: "sub", summary: "subscribe and print messages", run: runSub})
}

// jsonMsg is one line of `tern sub --json`.
type jsonMsg struct {
	Subject string      `json:"subject"`
	Reply   string      `json:"reply"`
	Headers tern.Header `json:"headers"`
	Data    string      `json:"data"`
	Size    int         `json:"size"`
}

func runSub(ctx context.Context, args []string) error {
	return subscribeAndPrint(ctx, args, os.Stdout)
}

func subscribeAndPrint(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("sub", "sub [options] <subject>")
	var cf clientFlags
	cf.register(fs, "tern-sub")
	queue := fs.String("queue", "", "join this queue group")
	filter := fs.String("filter", "", `receiver-side filter, e.g. 'hdr.sender == "s1" && size <= 512'`)
	count := fs.Int("count", 0, "exit after this many messages (0 = run until interrupted)")
	raw := fs.Bool("raw", false, "print only payloads")
	headers := fs.Bool("headers", true, "print headers")
	asJSON := fs.Bool("json", false, "print one JSON object per message")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("want one subject")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []tern.SubOpt{}
	if *filter != "" {
		opts = append(opts, tern.Filter(*filter))
	}
	if *queue != "" {
		opts = append(opts, tern.Queue(*queue))
	}
	sub, err := nc.SubscribeSync(fs.Arg(0), opts...)
	if err != nil {
		return err
	}
	if *count > 0 {
		// The server stops at count too, so a queue group's other members get the rest.
		if err := sub.AutoUnsubscribe(*count); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "listening on %q\n", fs.Arg(0))
	enc := json.NewEncoder(out)
	for n := 1; *count <= 0 || n <= *count; n++ {
		m, err := sub.NextMsgContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			return err
		}
		switch {
		case *asJSON:
			h := m.Header
			if h == nil {
				h = tern.Header{}
			}
			if err := enc.Encode(jsonMsg{Subject: m.Subject, Reply: m.Reply, Headers: h, Data: string(m.Data), Size: len(m.Data)}); err != nil {
				return err
			}
		case *raw:
			fmt.Fprintf(out, "%s\n", m.Data)
		default:
			fmt.Fprintf(out, "[#%d] %s (%d B)", n, m.Subject, len(m.Data))
			if m.Reply != "" {
				fmt.Fprintf(out, " reply %s", m.Reply)
			}
			fmt.Fprintln(out)
			if *headers && len(m.Header) > 0 {
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
}
