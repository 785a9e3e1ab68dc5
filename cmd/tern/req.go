package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	tern "github.com/tern-mq/tern/client/go"
)

func init() {
	register(command{name: "req", summary: "send a request and print the reply", run: func(ctx context.Context, args []string) error {
		return request(ctx, args, os.Stdout)
	}})
}

func request(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("req", "req [options] <subject> [payload]   (payload '-' reads stdin)")
	var cf clientFlags
	cf.register(fs, "tern-req")
	var hdr headerFlag
	fs.Var(&hdr, "header", "header `key=value` (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return fmt.Errorf("want a subject and an optional payload")
	}
	payload := []byte(fs.Arg(1))
	if fs.Arg(1) == "-" {
		b, err := io.ReadAll(os.Stdin)
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
	rctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
	r, err := nc.RequestMsg(rctx, &tern.Msg{Subject: fs.Arg(0), Header: hdr.h, Data: payload})
	switch {
	case errors.Is(err, tern.ErrNoResponders):
		return fmt.Errorf("no responders on %q", fs.Arg(0))
	case errors.Is(err, tern.ErrTimeout):
		return fmt.Errorf("no reply on %q within %s", fs.Arg(0), cf.timeout)
	case err != nil:
		return err
	}
	fmt.Fprintf(out, "%s\n", r.Data)
	return nil
}
