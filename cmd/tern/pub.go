package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
)

func newPubCmd() *cobra.Command {
	var (
		cf    clientFlags
		hdr   headerFlag
		reply string
		count int
		sleep time.Duration
		ack   bool
		msgID string
		key   string
	)
	cmd := &cobra.Command{
		Use:   "pub <subject> [payload] [options]",
		Short: "Publish messages",
		Long: `Publishes a message to a subject. The payload is the second argument, or
standard input when it is absent or '-'; {{i}} in it becomes the message's
index with --count. With --ack the subject must be captured by a stream, and
each stream acknowledgement is printed. A payload that starts with '-' goes
after '--'.`,
		Example: `  tern pub sensors.k1.temp 21.5
  tern pub --header sender=s1 --count 3 sensors.k1.temp 'reading {{i}}'
  tern pub orders.new --ack --msg-id o-1 '{"id":1}'
  date | tern pub clock.tick
  tern pub numbers -- -1`,
		Args: argsBetween(1, 2, "want a subject and an optional payload"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ack && reply != "" {
				return usageErrorf("--ack and --reply exclude each other: the acknowledgement comes back on the reply subject")
			}
			var payload string
			if len(args) == 2 && args[1] != "-" {
				payload = args[1]
			} else {
				b, err := io.ReadAll(cmd.InOrStdin())
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
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			templated := strings.Contains(payload, "{{i}}")
			var streams *tern.Streams
			if ack {
				streams = nc.Streams(tern.APITimeout(cf.timeout))
			}
			for i := 0; i < count && ctx.Err() == nil; i++ {
				data := payload
				if templated {
					data = strings.ReplaceAll(payload, "{{i}}", strconv.Itoa(i))
				}
				m := &tern.Msg{Subject: args[0], Reply: reply, Header: hdr.h, Data: []byte(data)}
				if msgID != "" || key != "" {
					m.Header = tern.Header{}
					for k, v := range hdr.h {
						m.Header[k] = v
					}
					if msgID != "" {
						m.Header.Set(tern.MsgIDHeader, strings.ReplaceAll(msgID, "{{i}}", strconv.Itoa(i)))
					}
					if key != "" {
						m.Header.Set(tern.KeyHeader, strings.ReplaceAll(key, "{{i}}", strconv.Itoa(i)))
					}
				}
				if ack {
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
				if sleep > 0 && i+1 < count {
					select {
					case <-time.After(sleep):
					case <-ctx.Done():
					}
				}
			}
			if err := nc.Flush(); err != nil {
				return err
			}
			return nc.LastError()
		},
	}
	cf.register(cmd, "tern-pub")
	fs := cmd.Flags()
	fs.Var(&hdr, "header", "header `key=value` (repeatable)")
	fs.StringVar(&reply, "reply", "", "reply subject")
	fs.IntVar(&count, "count", 1, "publish this many messages; {{i}} in the payload becomes the index")
	fs.DurationVar(&sleep, "sleep", 0, "pause between messages")
	fs.BoolVar(&ack, "ack", false, "publish to a stream and wait for its acknowledgement; prints stream, partition and sequence")
	fs.StringVar(&msgID, "msg-id", "", "stream message id for duplicate detection ({{i}} becomes the index)")
	fs.StringVar(&key, "key", "", "stream partition key ({{i}} becomes the index)")
	return cmd
}
