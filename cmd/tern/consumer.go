package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	tern "github.com/tern-mq/tern/client/go"
)

func newConsumerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consumer <command>",
		Short: "Manage stream consumers and fetch from them (add, ls, info, next, rm)",
		Long: `Manages a stream's consumers: durable or ephemeral positions in a stream that
deliver its messages, pull (tern consumer next) or push (to a subject), and
redeliver what is not acknowledged. See docs/cli-streams.md.`,
		Example: `  tern consumer add ORDERS billing --filter orders.new
  tern consumer next ORDERS billing --count 5 --wait 1s
  tern consumer ls ORDERS
  tern consumer rm ORDERS billing`,
		Args: groupArgs,
		RunE: showUsage,
	}
	cmd.AddCommand(newConsumerAddCmd(), newConsumerListCmd(), newConsumerInfoCmd(), newConsumerNextCmd(), newConsumerRemoveCmd())
	return cmd
}

// consumerErr makes the usual failures read well on a terminal.
func consumerErr(err error, stream, consumer string) error {
	if errors.Is(err, tern.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %q not found on stream %q", consumer, stream)
	}
	return streamErr(err, stream)
}

// durationList is a comma-separated list of durations: 1s,5s,30s.
type durationList []tern.Duration

func (d *durationList) String() string {
	parts := make([]string, len(*d))
	for i, v := range *d {
		parts[i] = time.Duration(v).String()
	}
	return strings.Join(parts, ",")
}

func (d *durationList) Type() string { return "durations" }

func (d *durationList) Set(v string) error {
	*d = (*d)[:0]
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		x, err := time.ParseDuration(p)
		if err != nil || x <= 0 {
			return fmt.Errorf("backoff %q: want positive durations such as 1s,5s,30s", p)
		}
		*d = append(*d, tern.Duration(x))
	}
	return nil
}

// parseDeliver reads --deliver: all, new, last, last_per_subject, seq:N or
// time:RFC3339.
func parseDeliver(v string, cfg *tern.ConsumerConfig) error {
	switch {
	case v == "all" || v == "new" || v == "last" || v == "last_per_subject":
		cfg.DeliverPolicy = tern.DeliverPolicy(v)
	case strings.HasPrefix(v, "seq:"):
		n, err := strconv.ParseUint(v[4:], 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("--deliver %q: want seq:N with N at least 1", v)
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = tern.DeliverByStartSeq, n
	case strings.HasPrefix(v, "time:"):
		t, err := time.Parse(time.RFC3339Nano, v[5:])
		if err != nil {
			return fmt.Errorf("--deliver %q: want time:RFC3339, e.g. time:2025-01-02T15:04:05Z", v)
		}
		cfg.DeliverPolicy, cfg.OptStartTime = tern.DeliverByStartTime, &t
	default:
		return fmt.Errorf("--deliver %q: want all, new, last, last_per_subject, seq:N or time:RFC3339", v)
	}
	return nil
}

// ---------------------------------------------------------------------------------
// tern consumer add

func newConsumerAddCmd() *cobra.Command {
	var (
		cf                             clientFlags
		cfg                            tern.ConsumerConfig
		deliver                        string
		ack                            = string(tern.AckExplicit)
		ackWait, inactive, memberTimeo time.Duration
		backoff                        durationList
		ephemeral, asJSON              bool
	)
	cmd := &cobra.Command{
		Use:   "add <stream> <name> [options]",
		Short: "Create a durable consumer (--ephemeral: name optional)",
		Example: `  tern consumer add ORDERS billing --filter orders.new
  tern consumer add ORDERS audit --deliver seq:100 --ack all
  tern consumer add ORDERS retry --ack-wait 10s --backoff 10s,1m,5m --max-deliver 5
  tern consumer add ORDERS feed --deliver-subject feed.orders --deliver-group readers
  tern consumer add ORDERS --ephemeral --inactive-threshold 1m --json`,
		Args: argsBetween(1, 2, "want a stream and a consumer name (or --ephemeral)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			stream := args[0]
			switch {
			case len(args) == 2 && ephemeral:
				cfg.Name = args[1]
			case len(args) == 2:
				cfg.Durable = args[1]
			case !ephemeral:
				return usageErrorf("want a stream and a consumer name (or --ephemeral)")
			}
			if err := parseDeliver(deliver, &cfg); err != nil {
				return usageError{err}
			}
			cfg.AckPolicy = tern.AckPolicy(ack)
			if ackWait < 0 || inactive < 0 || memberTimeo < 0 || cfg.MaxAckPending < 0 || cfg.MaxDeliver < -1 {
				return usageErrorf("durations and limits must not be negative")
			}
			if cfg.DeliverGroup != "" && cfg.DeliverSubject == "" {
				return usageErrorf("--deliver-group needs --deliver-subject")
			}
			cfg.AckWait = tern.Duration(ackWait)
			cfg.Backoff = backoff
			cfg.InactiveThreshold = tern.Duration(inactive)
			cfg.MemberTimeout = tern.Duration(memberTimeo)
			nc, js, err := streamsConn(&cf)
			if err != nil {
				return err
			}
			defer nc.Close()
			info, err := js.AddConsumer(cmd.Context(), stream, cfg)
			if err != nil {
				return fmt.Errorf("create consumer on %q: %w", stream, streamErr(err, stream))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, info)
			}
			fmt.Fprintf(out, "Consumer %s/%s created\n\n", info.Stream, info.Name)
			printConsumerInfo(out, info)
			return nil
		},
	}
	cf.register(cmd, "tern-consumer")
	fs := cmd.Flags()
	fs.StringVar(&cfg.FilterSubject, "filter", "", "only messages whose subject matches this (wildcards allowed)")
	_ = fs.SetAnnotation("filter", defaultAnnotation, []string{"all"})
	fs.StringVar(&deliver, "deliver", "all", "where to start: all, new, last, last_per_subject, seq:N or time:RFC3339")
	enumFlag(cmd, &ack, "ack", "acknowledgements expected: none, explicit (each message) or all (covers earlier ones)", string(tern.AckNone), string(tern.AckExplicit), string(tern.AckAll))
	fs.DurationVar(&ackWait, "ack-wait", 0, "redeliver a message unacknowledged this long (0 = 30s)")
	fs.Var(&backoff, "backoff", "ack wait per delivery, comma-separated, e.g. 1s,5s,30s (the last repeats)")
	fs.IntVar(&cfg.MaxDeliver, "max-deliver", 0, "deliveries before a message is dead-lettered (0 = unlimited)")
	fs.StringVar(&cfg.DeadLetterSubject, "dead-letter", "", "`subject` dead messages are published to")
	_ = fs.SetAnnotation("dead-letter", defaultAnnotation, []string{"$TERN.DLQ.<stream>.<consumer>"})
	fs.IntVar(&cfg.MaxAckPending, "max-ack-pending", 0, "most delivered-but-unacknowledged messages (0 = 10000)")
	fs.StringVar(&cfg.DeliverSubject, "deliver-subject", "", "make a push consumer delivering to this `subject`")
	fs.StringVar(&cfg.DeliverGroup, "deliver-group", "", "push: deliver to one member of this queue `group`")
	fs.BoolVar(&ephemeral, "ephemeral", false, "ephemeral consumer (no durable name): removed after --inactive-threshold without pulls")
	fs.DurationVar(&inactive, "inactive-threshold", 0, "ephemeral: remove after this long without pulls or subscribers (0 = 5s)")
	fs.DurationVar(&memberTimeo, "member-timeout", 0, "consumer groups: a member not heard from this long leaves (0 = 10s)")
	fs.StringVar(&cfg.Description, "description", "", "free text shown in consumer info")
	fs.BoolVar(&asJSON, "json", false, "print the consumer info as JSON")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern consumer ls

func consumerKind(c *tern.ConsumerConfig) string {
	kind := "pull"
	if c.DeliverSubject != "" {
		kind = "push"
	}
	if c.Durable == "" {
		return kind + ", ephemeral"
	}
	return kind + ", durable"
}

func newConsumerListCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls <stream> [options]",
		Aliases: []string{"list"},
		Short:   "List a stream's consumers",
		Args:    argsBetween(1, 1, "want a stream name"),
		RunE: withStreams(&cf, func(cmd *cobra.Command, args []string, js *tern.Streams) error {
			out := cmd.OutOrStdout()
			list, err := js.ListConsumers(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("list consumers: %w", streamErr(err, args[0]))
			}
			sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
			if asJSON {
				if list == nil {
					list = []tern.ConsumerInfo{}
				}
				return printJSON(out, list)
			}
			if len(list) == 0 {
				fmt.Fprintf(out, "No consumers on stream %s\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTYPE\tFILTER\tACK\tPENDING\tACK PENDING\tREDELIVERED\tWAITING")
			for _, c := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", c.Name, consumerKind(&c.Config), orDefault(c.Config.FilterSubject, "-"),
					orDefault(string(c.Config.AckPolicy), string(tern.AckExplicit)), c.NumPending, c.NumAckPending, c.NumRedelivered, c.NumWaiting)
			}
			return tw.Flush()
		}),
	}
	cf.register(cmd, "tern-consumer")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the consumer infos as a JSON array")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern consumer info

func newConsumerInfoCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "info <stream> <name> [options]",
		Short: "Describe a consumer: its configuration and state",
		Args:  argsBetween(2, 2, "want a stream and a consumer name"),
		RunE: withStreams(&cf, func(cmd *cobra.Command, args []string, js *tern.Streams) error {
			info, err := js.ConsumerInfo(cmd.Context(), args[0], args[1])
			if err != nil {
				return consumerErr(err, args[0], args[1])
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), info)
			}
			printConsumerInfo(cmd.OutOrStdout(), info)
			return nil
		}),
	}
	cf.register(cmd, "tern-consumer")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the consumer info as JSON")
	return cmd
}

func printConsumerInfo(out io.Writer, info *tern.ConsumerInfo) {
	c := info.Config
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Consumer %s/%s\n", info.Stream, info.Name)
	fmt.Fprintf(tw, "  type:\t%s\n", consumerKind(&c))
	if c.Description != "" {
		fmt.Fprintf(tw, "  description:\t%s\n", c.Description)
	}
	fmt.Fprintf(tw, "  created:\t%s\n", fmtTime(info.Created))
	fmt.Fprintf(tw, "  filter:\t%s\n", orDefault(c.FilterSubject, "all subjects"))
	deliver := orDefault(string(c.DeliverPolicy), string(tern.DeliverAll))
	switch c.DeliverPolicy {
	case tern.DeliverByStartSeq:
		deliver = fmt.Sprintf("from seq %d", c.OptStartSeq)
	case tern.DeliverByStartTime:
		if c.OptStartTime != nil {
			deliver = "from " + fmtTime(*c.OptStartTime)
		}
	}
	fmt.Fprintf(tw, "  deliver:\t%s\n", deliver)
	fmt.Fprintf(tw, "  ack policy:\t%s\n", orDefault(string(c.AckPolicy), string(tern.AckExplicit)))
	fmt.Fprintf(tw, "  ack wait:\t%s\n", durOr(c.AckWait, "30s (default)"))
	if len(c.Backoff) > 0 {
		b := durationList(c.Backoff)
		fmt.Fprintf(tw, "  backoff:\t%s\n", b.String())
	}
	if c.MaxDeliver > 0 {
		fmt.Fprintf(tw, "  max deliver:\t%d\n", c.MaxDeliver)
	} else {
		fmt.Fprintf(tw, "  max deliver:\tunlimited\n")
	}
	fmt.Fprintf(tw, "  dead letter:\t%s\n", orDefault(c.DeadLetterSubject, "$TERN.DLQ."+info.Stream+"."+info.Name+" (default)"))
	if c.MaxAckPending > 0 {
		fmt.Fprintf(tw, "  max ack pending:\t%d\n", c.MaxAckPending)
	} else {
		fmt.Fprintf(tw, "  max ack pending:\t10000 (default)\n")
	}
	if c.DeliverSubject != "" {
		fmt.Fprintf(tw, "  deliver subject:\t%s\n", c.DeliverSubject)
		if c.DeliverGroup != "" {
			fmt.Fprintf(tw, "  deliver group:\t%s\n", c.DeliverGroup)
		}
	}
	if c.Durable == "" {
		fmt.Fprintf(tw, "  inactive threshold:\t%s\n", durOr(c.InactiveThreshold, "5s (default)"))
	}
	if c.MemberTimeout > 0 || len(info.Members) > 0 {
		fmt.Fprintf(tw, "  member timeout:\t%s\n", durOr(c.MemberTimeout, "10s (default)"))
	}
	fmt.Fprintf(tw, "State\n")
	fmt.Fprintf(tw, "  pending:\t%d\n", info.NumPending)
	fmt.Fprintf(tw, "  ack pending:\t%d\n", info.NumAckPending)
	fmt.Fprintf(tw, "  redelivered:\t%d\n", info.NumRedelivered)
	fmt.Fprintf(tw, "  waiting pulls:\t%d\n", info.NumWaiting)
	if len(info.Members) > 0 {
		fmt.Fprintf(tw, "  members:\t%s\n", strings.Join(info.Members, ", "))
	}
	for _, p := range info.Partitions {
		line := fmt.Sprintf("ack floor %d, delivered %d, ack pending %d", p.AckFloor, p.Delivered, p.AckPending)
		if p.Member != "" {
			line += ", member " + p.Member
		}
		fmt.Fprintf(tw, "  partition %d:\t%s\n", p.Partition, line)
	}
	_ = tw.Flush()
}

func durOr(d tern.Duration, def string) string {
	if d <= 0 {
		return def
	}
	return time.Duration(d).String()
}

// ---------------------------------------------------------------------------------
// tern consumer rm

func newConsumerRemoveCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "rm <stream> <name> [options]",
		Short: "Delete a consumer and its position",
		Args:  argsBetween(2, 2, "want a stream and a consumer name"),
		RunE: withStreams(&cf, func(cmd *cobra.Command, args []string, js *tern.Streams) error {
			if err := js.DeleteConsumer(cmd.Context(), args[0], args[1]); err != nil {
				return fmt.Errorf("delete consumer: %w", consumerErr(err, args[0], args[1]))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Consumer %s/%s deleted\n", args[0], args[1])
			return nil
		}),
	}
	cf.register(cmd, "tern-consumer")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern consumer next

// jsonStreamMsg is one line of `tern consumer next --json`.
type jsonStreamMsg struct {
	Stream      string      `json:"stream"`
	Consumer    string      `json:"consumer"`
	Partition   int         `json:"partition"`
	Seq         uint64      `json:"seq"`
	ConsumerSeq uint64      `json:"consumer_seq"`
	Deliveries  uint64      `json:"deliveries"`
	Pending     uint64      `json:"pending"`
	Time        time.Time   `json:"time"`
	Subject     string      `json:"subject"`
	Headers     tern.Header `json:"headers"`
	Data        string      `json:"data"`
	Size        int         `json:"size"`
	Ack         string      `json:"ack"`
}

func newConsumerNextCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "next <stream> <name> [options]",
		Short: "Fetch messages from a pull consumer, print and acknowledge them",
		Example: `  tern consumer next ORDERS billing
  tern consumer next ORDERS billing --count 10 --wait 1s --json
  tern consumer next ORDERS billing --nak --nak-delay 30s
  tern consumer next ORDERS billing --term --reason "cannot parse"`,
		Args: argsBetween(2, 2, "want a stream and a consumer name"),
	}
	cf.register(cmd, "tern-consumer")
	fs := cmd.Flags()
	count := fs.Int("count", 1, "fetch up to this many messages")
	wait := fs.Duration("wait", 5*time.Second, "wait this long for the messages to arrive")
	noWait := fs.Bool("no-wait", false, "return at once with what is ready")
	noAck := fs.Bool("no-ack", false, "do not acknowledge (the messages are delivered again after the ack wait)")
	nak := fs.Bool("nak", false, "ask for redelivery instead of acknowledging")
	nakDelay := fs.Duration("nak-delay", 0, "with --nak: redeliver after this long")
	term := fs.Bool("term", false, "stop redelivery and dead-letter the messages instead of acknowledging")
	reason := fs.String("reason", "", "with --term: the reason recorded in the dead letter")
	member := fs.String("member", "", "fetch as this member of the consumer's group (partitioned streams)")
	raw := fs.Bool("raw", false, "print only payloads")
	asJSON := fs.Bool("json", false, "print one JSON object per message")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, out := cmd.Context(), cmd.OutOrStdout()
		n := 0
		for _, b := range []bool{*noAck, *nak, *term} {
			if b {
				n++
			}
		}
		if n > 1 {
			return usageErrorf("--no-ack, --nak and --term exclude each other")
		}
		if *count < 1 || *wait <= 0 {
			return usageErrorf("--count must be at least 1 and --wait positive")
		}
		stream, name := args[0], args[1]
		nc, js, err := streamsConn(&cf)
		if err != nil {
			return err
		}
		defer nc.Close()
		// Ask first: a pull on a missing or push consumer would only time out.
		info, err := js.ConsumerInfo(ctx, stream, name)
		if err != nil {
			return consumerErr(err, stream, name)
		}
		if info.Config.DeliverSubject != "" {
			return fmt.Errorf("consumer %s/%s is a push consumer (deliver subject %q): subscribe to that subject with tern sub", stream, name, info.Config.DeliverSubject)
		}
		ackNone := info.Config.AckPolicy == tern.AckNone
		var popts []tern.PullOpt
		if *member != "" {
			popts = append(popts, tern.Member(*member))
		}
		// The pull's subscription goes with the connection.
		pull := js.Pull(stream, name, popts...)
		fopts := []tern.FetchOpt{tern.FetchMaxWait(*wait)}
		if *noWait {
			fopts = append(fopts, tern.FetchNoWait())
		}
		// Fetch waits out --wait even when ctx is cancelled: wait for either, so that an
		// interrupt ends the command at once (what was delivered comes again after the
		// ack wait).
		type fetched struct {
			msgs []*tern.Msg
			err  error
		}
		done := make(chan fetched, 1)
		go func() {
			m, err := pull.Fetch(ctx, *count, fopts...)
			done <- fetched{m, err}
		}()
		var msgs []*tern.Msg
		select {
		case f := <-done:
			msgs, err = f.msgs, f.err
		case <-ctx.Done():
			return nil // interrupted
		}
		switch {
		case errors.Is(err, tern.ErrNoMessages):
			return fmt.Errorf("no messages for %s/%s", stream, name)
		case errors.Is(err, tern.ErrTimeout) && len(msgs) == 0:
			return fmt.Errorf("no messages for %s/%s within %s", stream, name, *wait)
		case err != nil && len(msgs) == 0:
			return consumerErr(err, stream, name)
		}
		fetchErr := err
		enc := json.NewEncoder(out)
		for i, m := range msgs {
			meta, merr := m.Metadata()
			if merr != nil {
				return fmt.Errorf("fetch from %s/%s: unexpected reply %q: %s", stream, name, m.Subject, truncateText(string(m.Data)))
			}
			// Acknowledge before printing what was done; an ack is confirmed by the server.
			var done string
			switch {
			case ackNone:
				done = "no ack needed (ack policy none)"
			case *noAck:
				done = "not acknowledged"
			case *nak:
				if *nakDelay > 0 {
					err = m.NakWithDelay(*nakDelay)
					done = "nak, redeliver after " + nakDelay.String()
				} else {
					err = m.Nak()
					done = "nak, redeliver now"
				}
			case *term:
				err = m.Term(*reason)
				done = "terminated"
			default:
				actx, cancel := context.WithTimeout(ctx, cf.timeout)
				err = m.AckSync(actx)
				cancel()
				done = "acked"
			}
			if err != nil {
				return fmt.Errorf("%s seq %d: %s: %w", stream, meta.StreamSeq, done, err)
			}
			h := m.Header
			if h == nil {
				h = tern.Header{}
			}
			stored := time.Unix(0, meta.Time)
			switch {
			case *asJSON:
				if err := enc.Encode(jsonStreamMsg{Stream: meta.Stream, Consumer: meta.Consumer, Partition: meta.Partition,
					Seq: meta.StreamSeq, ConsumerSeq: meta.ConsumerSeq, Deliveries: meta.Deliveries, Pending: meta.Pending,
					Time: stored.UTC(), Subject: m.Subject, Headers: h, Data: string(m.Data), Size: len(m.Data), Ack: done}); err != nil {
					return err
				}
			case *raw:
				fmt.Fprintf(out, "%s\n", m.Data)
			default:
				fmt.Fprintf(out, "[#%d] %s (%d B)\n", i+1, m.Subject, len(m.Data))
				fmt.Fprintf(out, "  stream %s  partition %d  seq %d  consumer seq %d  deliveries %d  pending %d\n",
					meta.Stream, meta.Partition, meta.StreamSeq, meta.ConsumerSeq, meta.Deliveries, meta.Pending)
				fmt.Fprintf(out, "  stored %s\n", fmtTime(stored))
				printHeaders(out, h)
				fmt.Fprintf(out, "%s\n", m.Data)
				fmt.Fprintf(out, "  (%s)\n\n", done)
			}
		}
		// Nak and term are plain publishes: make sure the server has them before exiting.
		if err := nc.Flush(); err != nil {
			return err
		}
		if fetchErr != nil && !errors.Is(fetchErr, tern.ErrTimeout) {
			return consumerErr(fetchErr, stream, name)
		}
		return nil
	}
	return cmd
}

func truncateText(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
