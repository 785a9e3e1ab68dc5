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
	ch := make(chan *tern.Msg, 4096)
	opts := []tern.SubOpt{}
	if *filter != "" {
		opts = append(opts, tern.Filter(*filter))
	}
	if *queue != "" {
		opts = append(opts, tern.Queue(*queue))
	}
	if _, err := nc.ChanSubscribe(fs.Arg(0), ch, opts...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "listening on %q\n", fs.Arg(0))
	enc := json.NewEncoder(out)
	for n := 1; *count == 0 || n <= *count; n++ {
		var m *tern.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return nil
		}
		switch {
		case *asJSON:
			_ = enc.Encode(map[string]any{"subject": m.Subject, "reply": m.Reply, "headers": m.Header,
				"data": string(m.Data), "size": len(m.Data)})
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
