package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	tern "github.com/tern-mq/tern/client/go"
)

func init() {
	register(command{name: "reply", summary: "answer requests on a subject", run: runReply})
}

func runReply(ctx context.Context, args []string) error {
	fs := newFlagSet("reply", "reply [options] <subject> <response>   ({{request}} in the response becomes the request payload)")
	var cf clientFlags
	cf.register(fs, "tern-reply")
	queue := fs.String("queue", "", "queue group, so several responders share the load")
	count := fs.Int("count", 0, "exit after answering this many requests (0 = until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return fmt.Errorf("want a subject and a response")
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	response := fs.Arg(1)
	done := make(chan struct{})
	var answered atomic.Int64
	handler := func(m *tern.Msg) {
		if m.Reply == "" {
			return
		}
		if err := m.Respond([]byte(strings.ReplaceAll(response, "{{request}}", string(m.Data)))); err != nil {
			fmt.Fprintf(os.Stderr, "respond: %v\n", err)
			return
		}
		if n := answered.Add(1); *count > 0 && n == int64(*count) {
			close(done)
		}
	}
	opts := []tern.SubOpt{}
	if *queue != "" {
		opts = append(opts, tern.Queue(*queue))
	}
	if _, err := nc.Subscribe(fs.Arg(0), handler, opts...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "answering requests on %q\n", fs.Arg(0))
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Answer what has already arrived, make sure the answers left, then close.
	return nc.Drain()
}
