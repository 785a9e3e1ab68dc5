package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

func init() {
	register(command{name: "consumer", summary: "manage stream consumers and fetch from them (add, ls, info, next, rm)",
		run: func(ctx context.Context, args []string) error { return consumerCmd(ctx, args, os.Stdout) }})
}

const consumerUsage = `Usage: tern consumer <command> [options] <stream> [name]

Commands:
  add <stream> <name>    create a durable consumer (--ephemeral: name optional)
  ls <stream>            list a stream's consumers
  info <stream> <name>   describe a consumer
  next <stream> <name>   fetch messages from a pull consumer, print and acknowledge them
  rm <stream> <name>     delete a consumer and its position

Run 'tern consumer <command> --help' for the options of a command.
Options may come before or after the arguments. See docs/cli-streams.md.
`

func consumerCmd(ctx context.Context, args []string, out io.Writer) error {
	return dispatch(ctx, args, out, consumerUsage, []subcommand{
		{"add", consumerAdd},
		{"ls", consumerList},
		{"list", consumerList},
		{"info", consumerInfo},
		{"next", consumerNext},
		{"rm", consumerRemove},
	})
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

func (d *durationList) Get() any { return d.String() }

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

func consumerAdd(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("consumer add", "consumer add [options] <stream> <name>   (name optional with --ephemeral)")
	var cf clientFlags
	cf.register(fs, "tern-consumer")
	var cfg tern.ConsumerConfig
	fs.StringVar(&cfg.FilterSubject, "filter", "", "only messages whose subject matches this (wildcards allowed; default: all)")
	deliver := fs.String("deliver", "all", "where to start: all, new, last, last_per_subject, seq:N or time:RFC3339")
	ack := fs.String("ack", "explicit", "acknowledgements expected: none, explicit (each message) or all (covers earlier ones)")
	ackWait := fs.Duration("ack-wait", 0, "redeliver a message unacknowledged this long (0 = 30s)")
	var backoff durationList
	fs.Var(&backoff, "backoff", "ack wait per delivery, comma-separated, e.g. 1s,5s,30s (the last repeats)")
	fs.IntVar(&cfg.MaxDeliver, "max-deliver", 0, "deliveries before a message is dead-lettered (0 = unlimited)")
	fs.StringVar(&cfg.DeadLetterSubject, "dead-letter", "", "subject dead messages are published to (default $TERN.DLQ.<stream>.<consumer>)")
	fs.IntVar(&cfg.MaxAckPending, "max-ack-pending", 0, "most delivered-but-unacknowledged messages (0 = 10000)")
	fs.StringVar(&cfg.DeliverSubject, "deliver-subject", "", "make a push consumer delivering to this subject")
	fs.StringVar(&cfg.DeliverGroup, "deliver-group", "", "push: deliver to one member of this queue group")
	ephemeral := fs.Bool("ephemeral", false, "ephemeral consumer (no durable name): removed after --inactive-threshold without pulls")
	inactive := fs.Duration("inactive-threshold", 0, "ephemeral: remove after this long without pulls or subscribers (0 = 5s)")
	memberTimeout := fs.Duration("member-timeout", 0, "consumer groups: a member not heard from this long leaves (0 = 10s)")
	fs.StringVar(&cfg.Description, "description", "", "free text shown in consumer info")
	asJSON := fs.Bool("json", false, "print the consumer info as JSON")
	pos, err := parseArgs(fs, args, 1, 2)
	if err != nil {
		return err
	}
	stream := pos[0]
	switch {
	case len(pos) == 2 && *ephemeral:
		cfg.Name = pos[1]
	case len(pos) == 2:
		cfg.Durable = pos[1]
	case !*ephemeral:
		fs.Usage()
		return errors.New("want a stream and a consumer name (or --ephemeral)")
	}
	if err := parseDeliver(*deliver, &cfg); err != nil {
		return err
	}
	switch *ack {
	case "none", "explicit", "all":
		cfg.AckPolicy = tern.AckPolicy(*ack)
	default:
		return fmt.Errorf("--ack %q: want none, explicit or all", *ack)
	}
	if *ackWait < 0 || *inactive < 0 || *memberTimeout < 0 || cfg.MaxAckPending < 0 || cfg.MaxDeliver < -1 {
		return errors.New("durations and limits must not be negative")
	}
	if cfg.DeliverGroup != "" && cfg.DeliverSubject == "" {
		return errors.New("--deliver-group needs --deliver-subject")
	}
	cfg.AckWait = tern.Duration(*ackWait)
	cfg.Backoff = backoff
	cfg.InactiveThreshold = tern.Duration(*inactive)
	cfg.MemberTimeout = tern.Duration(*memberTimeout)
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	info, err := js.AddConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("create consumer on %q: %w", stream, streamErr(err, stream))
	}
	if *asJSON {
		return printJSON(out, info)
	}
	fmt.Fprintf(out, "Consumer %s/%s created\n\n", info.Stream, info.Name)
	printConsumerInfo(out, info)
	return nil
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

func consumerList(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("consumer ls", "consumer ls [options] <stream>")
	var cf clientFlags
	cf.register(fs, "tern-consumer")
	asJSON := fs.Bool("json", false, "print the consumer infos as a JSON array")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	list, err := js.ListConsumers(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("list consumers: %w", streamErr(err, pos[0]))
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	if *asJSON {
		if list == nil {
			list = []tern.ConsumerInfo{}
		}
		return printJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(out, "No consumers on stream %s\n", pos[0])
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tFILTER\tACK\tPENDING\tACK PENDING\tREDELIVERED\tWAITING")
	for _, c := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", c.Name, consumerKind(&c.Config), orDefault(c.Config.FilterSubject, "-"),
			orDefault(string(c.Config.AckPolicy), string(tern.AckExplicit)), c.NumPending, c.NumAckPending, c.NumRedelivered, c.NumWaiting)
	}
	return tw.Flush()
}

// ---------------------------------------------------------------------------------
// tern consumer info

func consumerInfo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("consumer info", "consumer info [options] <stream> <name>")
	var cf clientFlags
	cf.register(fs, "tern-consumer")
	asJSON := fs.Bool("json", false, "print the consumer info as JSON")
	pos, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	info, err := js.ConsumerInfo(ctx, pos[0], pos[1])
	if err != nil {
		return consumerErr(err, pos[0], pos[1])
	}
	if *asJSON {
		return printJSON(out, info)
	}
	printConsumerInfo(out, info)
	return nil
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

func consumerRemove(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("consumer rm", "consumer rm [options] <stream> <name>")
	var cf clientFlags
	cf.register(fs, "tern-consumer")
	pos, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := js.DeleteConsumer(ctx, pos[0], pos[1]); err != nil {
		return fmt.Errorf("delete consumer: %w", consumerErr(err, pos[0], pos[1]))
	}
	fmt.Fprintf(out, "Consumer %s/%s deleted\n", pos[0], pos[1])
	return nil
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

func consumerNext(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("consumer next", "consumer next [options] <stream> <name>")
	var cf clientFlags
	cf.register(fs, "tern-consumer")
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
	pos, err := parseArgs(fs, args, 2, 2)
	if err != nil {
		return err
	}
	n := 0
	for _, b := range []bool{*noAck, *nak, *term} {
		if b {
			n++
		}
	}
	if n > 1 {
		return errors.New("--no-ack, --nak and --term exclude each other")
	}
	if *count < 1 || *wait <= 0 {
		return errors.New("--count must be at least 1 and --wait positive")
	}
	stream, name := pos[0], pos[1]
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

func truncateText(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
