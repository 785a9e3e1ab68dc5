package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

func init() {
	register(command{name: "pub", summary: "publish messages", run: runPub})
}

func runPub(ctx context.Context, args []string) error {
	return publish(ctx, args, os.Stdout)
}

// publish is tern pub; with --ack it prints each stream acknowledgement to out.
func publish(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("pub", "pub [options] <subject> [payload]   (payload from stdin when absent or '-')")
	var cf clientFlags
	cf.register(fs, "tern-pub")
	var hdr headerFlag
	fs.Var(&hdr, "header", "header `key=value` (repeatable)")
	reply := fs.String("reply", "", "reply subject")
	count := fs.Int("count", 1, "publish this many messages; {{i}} in the payload becomes the index")
	sleep := fs.Duration("sleep", 0, "pause between messages")
	ack := fs.Bool("ack", false, "publish to a stream and wait for its acknowledgement; prints stream, partition and sequence")
	msgID := fs.String("msg-id", "", "stream message id for duplicate detection ({{i}} becomes the index)")
	key := fs.String("key", "", "stream partition key ({{i}} becomes the index)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ack && *reply != "" {
		return fmt.Errorf("--ack and --reply exclude each other: the acknowledgement comes back on the reply subject")
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return fmt.Errorf("want a subject and an optional payload")
	}
	subject := fs.Arg(0)
	var payload string
	if fs.NArg() == 2 && fs.Arg(1) != "-" {
		payload = fs.Arg(1)
	} else {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		payload = string(b)
	}
	nc, err := cf.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	templated := strings.Contains(payload, "{{i}}")
	var streams *tern.Streams
	if *ack {
		streams = nc.Streams(tern.APITimeout(cf.timeout))
	}
	for i := 0; i < *count && ctx.Err() == nil; i++ {
		data := payload
		if templated {
			data = strings.ReplaceAll(payload, "{{i}}", strconv.Itoa(i))
		}
		m := &tern.Msg{Subject: subject, Reply: *reply, Header: hdr.h, Data: []byte(data)}
		if *msgID != "" || *key != "" {
			m.Header = tern.Header{}
			for k, v := range hdr.h {
				m.Header[k] = v
			}
			if *msgID != "" {
				m.Header.Set(tern.MsgIDHeader, strings.ReplaceAll(*msgID, "{{i}}", strconv.Itoa(i)))
			}
			if *key != "" {
				m.Header.Set(tern.KeyHeader, strings.ReplaceAll(*key, "{{i}}", strconv.Itoa(i)))
			}
		}
		if *ack {
			pa, err := streams.PublishMsg(ctx, m)
			if err != nil {
				return err
			}
			dup := ""
			if pa.Duplicate {
				dup = " (duplicate)"
			}
			fmt.Fprintf(out, "stream %s partition %d seq %d%s\n", pa.Stream, pa.Partition, pa.Seq, dup)
		} else if err := nc.PublishMsg(m); err != nil {
			return err
		}
		if *sleep > 0 && i+1 < *count {
			select {
			case <-time.After(*sleep):
			case <-ctx.Done():
			}
		}
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	if err := nc.LastError(); err != nil {
		return err
	}
	return nil
}
