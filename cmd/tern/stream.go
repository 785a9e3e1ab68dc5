package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	tern "github.com/tern-mq/tern/client/go"
	"github.com/tern-mq/tern/internal/wire"
)

func init() {
	register(command{name: "stream", summary: "manage durable streams (add, ls, info, rm, purge, get)",
		run: func(ctx context.Context, args []string) error { return streamCmd(ctx, args, os.Stdout) }})
}

const streamUsage = `Usage: tern stream <command> [options] [arguments]

Commands:
  add <name>       create a stream (or confirm an identical one exists)
  ls               list the streams
  info <name>      describe a stream
  rm <name>        delete a stream and its messages (needs --force)
  purge <name>     remove messages (all, or by --subject, --keep, --seq)
  get <name>       read one stored message (--seq N [--partition P], or --last-subject S)

Run 'tern stream <command> --help' for the options of a command.
Options may come before or after the arguments. See docs/cli-streams.md.
`

// subcommand is one command of a command group such as tern stream.
type subcommand struct {
	name string
	run  func(ctx context.Context, args []string, out io.Writer) error
}

// dispatch runs the subcommand named by args[0]; with none, or with --help, it prints
// the group's usage.
func dispatch(ctx context.Context, args []string, out io.Writer, usage string, subs []subcommand) error {
	usageOut := func() io.Writer {
		if flagOutput != nil {
			return flagOutput
		}
		return os.Stderr
	}
	if len(args) == 0 {
		fmt.Fprint(usageOut(), usage)
		return errors.New("want a command")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(usageOut(), usage)
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:], out)
		}
	}
	fmt.Fprint(usageOut(), usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func streamCmd(ctx context.Context, args []string, out io.Writer) error {
	return dispatch(ctx, args, out, streamUsage, []subcommand{
		{"add", streamAdd},
		{"ls", streamList},
		{"list", streamList},
		{"info", streamInfo},
		{"rm", streamRemove},
		{"purge", streamPurge},
		{"get", streamGet},
	})
}

// parseArgs parses flags that may come before, between or after the positional
// arguments (Go's flag package stops at the first argument), and checks their number.
func parseArgs(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...) // everything after "--" is an argument
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minArgs || len(pos) > maxArgs {
		fs.Usage()
		switch {
		case minArgs == maxArgs && minArgs == 0:
			return nil, fmt.Errorf("unexpected argument %q", pos[0])
		case len(pos) > maxArgs:
			return nil, fmt.Errorf("too many arguments: %s", strings.Join(pos, " "))
		default:
			return nil, errors.New("missing arguments")
		}
	}
	return pos, nil
}

// streamsConn connects and returns the stream API, its requests bounded by --timeout.
func streamsConn(cf *clientFlags) (*tern.Conn, *tern.Streams, error) {
	nc, err := cf.connect()
	if err != nil {
		return nil, nil, err
	}
	return nc, nc.Streams(tern.APITimeout(cf.timeout)), nil
}

// streamErr makes the usual stream API failures read well on a terminal.
func streamErr(err error, stream string) error {
	switch {
	case errors.Is(err, tern.ErrStreamNotFound):
		return fmt.Errorf("stream %q not found", stream)
	case errors.Is(err, tern.ErrStreamUnavailable):
		return fmt.Errorf("%w (is the server running with streams enabled, store_dir set?)", err)
	}
	return err
}

// printJSON writes v as indented JSON.
func printJSON(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// sizeFlag is a byte count given as 1024, 64KiB, 1.5GiB, 10MB, ...
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }
func (s *sizeFlag) Get() any       { return int64(*s) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// parseSize reads a byte count with an optional unit: B, K/KiB, M/MiB, G/GiB, T/TiB
// (powers of 1024) or KB, MB, GB, TB (powers of 1000).
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	num := strings.TrimRightFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	mult := map[string]float64{"": 1, "B": 1, "K": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TIB": 1 << 40, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || mult == 0 || f < 0 {
		return 0, fmt.Errorf("%q is not a size (want e.g. 1048576, 512KiB, 1GiB or 10MB)", v)
	}
	if n := f * mult; n < 1<<62 {
		return int64(n), nil
	}
	return 0, fmt.Errorf("size %q is too large", v)
}

// humanBytes prints a byte count in binary units: 512 B, 1.5 KiB, 3.2 GiB.
func humanBytes(n uint64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n), []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// ---------------------------------------------------------------------------------
// tern stream add

func streamAdd(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream add", "stream add [options] <name>")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	subjects := fs.String("subjects", "", "comma-separated subjects to capture, wildcards allowed (default: the stream name)")
	retention := fs.String("retention", "limits", "what removes messages besides the limits: limits, workqueue or interest")
	maxAge := fs.Duration("max-age", 0, "remove messages older than this, e.g. 1h (0 = no limit)")
	var maxBytes, maxMsgSize, segment sizeFlag
	fs.Var(&maxBytes, "max-bytes", "size limit over all partitions, e.g. 1GiB (0 = no limit)")
	maxMsgs := fs.Uint64("max-msgs", 0, "message count limit over all partitions (0 = no limit)")
	fs.Var(&maxMsgSize, "max-msg-size", "largest payload accepted, e.g. 64KiB (0 = the server's max_payload)")
	discard := fs.String("discard", "old", "at a limit: old removes the oldest messages, new refuses new ones")
	partitions := fs.Int("partitions", 1, "independent ordered logs; a message's partition comes from its key or subject")
	dupeWindow := fs.Duration("dupe-window", 0, "how long message ids are remembered for duplicate detection (0 = 2m)")
	sync := fs.String("sync", "", "fsync policy of this stream: always, interval or never (default: the server's)")
	fs.Var(&segment, "segment-size", "segment file size, e.g. 64MiB (0 = the server's segment_size)")
	asJSON := fs.Bool("json", false, "print the stream info as JSON")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cfg := tern.StreamConfig{
		Name:            pos[0],
		Retention:       tern.Retention(*retention),
		MaxAge:          tern.Duration(*maxAge),
		MaxBytes:        int64(maxBytes),
		MaxMsgs:         *maxMsgs,
		MaxMsgSize:      int(maxMsgSize),
		Discard:         *discard,
		Partitions:      *partitions,
		DuplicateWindow: tern.Duration(*dupeWindow),
		Sync:            *sync,
		SegmentBytes:    int64(segment),
	}
	for _, s := range strings.Split(*subjects, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Subjects = append(cfg.Subjects, s)
		}
	}
	if len(cfg.Subjects) == 0 {
		cfg.Subjects = []string{cfg.Name}
	}
	switch cfg.Retention {
	case tern.RetainLimits, tern.RetainWorkQueue, tern.RetainInterest:
	default:
		return fmt.Errorf("--retention %q: want limits, workqueue or interest", *retention)
	}
	if cfg.Discard != "old" && cfg.Discard != "new" {
		return fmt.Errorf("--discard %q: want old or new", cfg.Discard)
	}
	switch cfg.Sync {
	case "", "always", "interval", "never":
	default:
		return fmt.Errorf("--sync %q: want always, interval or never", cfg.Sync)
	}
	if cfg.Partitions < 1 || *maxAge < 0 || *dupeWindow < 0 {
		return errors.New("--partitions must be at least 1, --max-age and --dupe-window not negative")
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	// Creating an identical stream again succeeds; say so rather than "created".
	_, existed := js.StreamInfo(ctx, cfg.Name)
	info, err := js.AddStream(ctx, cfg)
	if err != nil {
		return fmt.Errorf("create stream %q: %w", cfg.Name, streamErr(err, cfg.Name))
	}
	if *asJSON {
		return printJSON(out, info)
	}
	if existed == nil {
		fmt.Fprintf(out, "Stream %s already exists with this configuration\n\n", info.Config.Name)
	} else {
		fmt.Fprintf(out, "Stream %s created\n\n", info.Config.Name)
	}
	printStreamInfo(out, info)
	return nil
}

// ---------------------------------------------------------------------------------
// tern stream ls

func streamList(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream ls", "stream ls [options]")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	asJSON := fs.Bool("json", false, "print the stream infos as a JSON array")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	list, err := js.ListStreams(ctx)
	if err != nil {
		return fmt.Errorf("list streams: %w", streamErr(err, ""))
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Config.Name < list[j].Config.Name })
	if *asJSON {
		if list == nil {
			list = []tern.StreamInfo{}
		}
		return printJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "No streams")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSUBJECTS\tRETENTION\tMESSAGES\tBYTES\tFIRST SEQ\tLAST SEQ\tCONSUMERS")
	for _, s := range list {
		st := s.State
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\n", s.Config.Name, strings.Join(s.Config.Subjects, ","),
			orDefault(string(s.Config.Retention), string(tern.RetainLimits)), st.Msgs, humanBytes(st.Bytes), st.FirstSeq, st.LastSeq, st.Consumers)
	}
	return tw.Flush()
}

// ---------------------------------------------------------------------------------
// tern stream info

func streamInfo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream info", "stream info [options] <name>")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	asJSON := fs.Bool("json", false, "print the stream info as JSON")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	info, err := js.StreamInfo(ctx, pos[0])
	if err != nil {
		return streamErr(err, pos[0])
	}
	if *asJSON {
		return printJSON(out, info)
	}
	printStreamInfo(out, info)
	return nil
}

func printStreamInfo(out io.Writer, info *tern.StreamInfo) {
	c, st := info.Config, info.State
	limit := func(set bool, v string) string {
		if set {
			return v
		}
		return "unlimited"
	}
	serverDefault := func(set bool, v string) string {
		if set {
			return v
		}
		return "server default"
	}
	parts := max(c.Partitions, 1)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Stream %s\n", c.Name)
	fmt.Fprintf(tw, "  created:\t%s\n", fmtTime(info.Created))
	fmt.Fprintf(tw, "  subjects:\t%s\n", strings.Join(c.Subjects, ", "))
	fmt.Fprintf(tw, "  retention:\t%s\n", orDefault(string(c.Retention), string(tern.RetainLimits)))
	fmt.Fprintf(tw, "  max age:\t%s\n", limit(c.MaxAge > 0, time.Duration(c.MaxAge).String()))
	fmt.Fprintf(tw, "  max bytes:\t%s\n", limit(c.MaxBytes > 0, humanBytes(uint64(max(c.MaxBytes, 0)))))
	fmt.Fprintf(tw, "  max msgs:\t%s\n", limit(c.MaxMsgs > 0, strconv.FormatUint(c.MaxMsgs, 10)))
	fmt.Fprintf(tw, "  max msg size:\t%s\n", serverDefault(c.MaxMsgSize > 0, humanBytes(uint64(max(c.MaxMsgSize, 0)))))
	fmt.Fprintf(tw, "  discard:\t%s\n", orDefault(c.Discard, "old"))
	fmt.Fprintf(tw, "  partitions:\t%d\n", parts)
	fmt.Fprintf(tw, "  duplicate window:\t%s\n", serverDefault(c.DuplicateWindow > 0, time.Duration(c.DuplicateWindow).String()))
	fmt.Fprintf(tw, "  sync:\t%s\n", serverDefault(c.Sync != "", c.Sync))
	fmt.Fprintf(tw, "  segment size:\t%s\n", serverDefault(c.SegmentBytes > 0, humanBytes(uint64(max(c.SegmentBytes, 0)))))
	fmt.Fprintf(tw, "State\n")
	fmt.Fprintf(tw, "  messages:\t%d\n", st.Msgs)
	fmt.Fprintf(tw, "  bytes:\t%s\n", humanBytes(st.Bytes))
	fmt.Fprintf(tw, "  first seq:\t%d (%s)\n", st.FirstSeq, fmtTime(st.FirstTime))
	fmt.Fprintf(tw, "  last seq:\t%d (%s)\n", st.LastSeq, fmtTime(st.LastTime))
	if st.Deleted > 0 {
		fmt.Fprintf(tw, "  deleted:\t%d\n", st.Deleted)
	}
	fmt.Fprintf(tw, "  consumers:\t%d\n", st.Consumers)
	if len(st.Parts) > 1 {
		for i, p := range st.Parts {
			fmt.Fprintf(tw, "  partition %d:\t%d msgs, %s, seq %d..%d\n", i, p.Msgs, humanBytes(p.Bytes), p.FirstSeq, p.LastSeq)
		}
	}
	for _, c := range info.Corrupt {
		fmt.Fprintf(tw, "  CORRUPT:\t%s\n", c)
	}
	_ = tw.Flush()
}

// ---------------------------------------------------------------------------------
// tern stream rm

func streamRemove(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream rm", "stream rm [options] <name>")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	var force bool
	fs.BoolVar(&force, "force", false, "really delete the stream, its messages and its consumers")
	fs.BoolVar(&force, "f", false, "short for --force")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if !force {
		return fmt.Errorf("deleting stream %q removes its messages and consumers; add --force (-f) to do it", pos[0])
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := js.DeleteStream(ctx, pos[0]); err != nil {
		return fmt.Errorf("delete stream %q: %w", pos[0], streamErr(err, pos[0]))
	}
	fmt.Fprintf(out, "Stream %s deleted\n", pos[0])
	return nil
}

// ---------------------------------------------------------------------------------
// tern stream purge

func streamPurge(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream purge", "stream purge [options] <name>")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	var req tern.PurgeRequest
	fs.StringVar(&req.Subject, "subject", "", "only messages on this subject (wildcards allowed)")
	fs.Uint64Var(&req.Keep, "keep", 0, "keep this many of the newest messages (per partition)")
	fs.Uint64Var(&req.UpTo, "seq", 0, "only messages below this sequence (per partition)")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if req.Keep > 0 && req.UpTo > 0 {
		return errors.New("--keep and --seq exclude each other")
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	n, err := js.PurgeStream(ctx, pos[0], &req)
	if err != nil {
		return fmt.Errorf("purge stream %q: %w", pos[0], streamErr(err, pos[0]))
	}
	fmt.Fprintf(out, "Purged %d %s from stream %s\n", n, plural(n, "message", "messages"), pos[0])
	return nil
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ---------------------------------------------------------------------------------
// tern stream get

// jsonStoredMsg is the --json form of tern stream get.
type jsonStoredMsg struct {
	Stream    string      `json:"stream"`
	Partition int         `json:"partition"`
	Seq       uint64      `json:"seq"`
	Subject   string      `json:"subject"`
	Time      time.Time   `json:"time"`
	Headers   tern.Header `json:"headers"`
	Data      string      `json:"data"`
	Size      int         `json:"size"`
}

func streamGet(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("stream get", "stream get [options] <name>   (--seq N [--partition P], or --last-subject S)")
	var cf clientFlags
	cf.register(fs, "tern-stream")
	seq := fs.Uint64("seq", 0, "sequence of the message in its partition")
	partition := fs.Int("partition", 0, "partition to read")
	last := fs.String("last-subject", "", "read the last message stored on this subject (in --partition)")
	raw := fs.Bool("raw", false, "print only the payload")
	asJSON := fs.Bool("json", false, "print the message as JSON")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if (*seq == 0) == (*last == "") {
		return errors.New("want exactly one of --seq N and --last-subject S")
	}
	nc, js, err := streamsConn(&cf)
	if err != nil {
		return err
	}
	defer nc.Close()
	var m *tern.StoredMsg
	if *last != "" {
		m, err = js.GetLastMsg(ctx, pos[0], *partition, *last)
	} else {
		m, err = js.GetMsg(ctx, pos[0], *partition, *seq)
	}
	if err != nil {
		return streamErr(err, pos[0])
	}
	hdr := tern.Header{}
	wire.Header(m.Header).Each(func(k, v []byte) bool {
		hdr.Add(string(k), string(v))
		return true
	})
	switch {
	case *asJSON:
		return printJSON(out, jsonStoredMsg{Stream: pos[0], Partition: m.Partition, Seq: m.Seq, Subject: m.Subject,
			Time: m.Time, Headers: hdr, Data: string(m.Data), Size: len(m.Data)})
	case *raw:
		fmt.Fprintf(out, "%s\n", m.Data)
	default:
		fmt.Fprintf(out, "[%s partition %d seq %d] %s (%d B) stored %s\n", pos[0], m.Partition, m.Seq, m.Subject, len(m.Data), fmtTime(m.Time))
		printHeaders(out, hdr)
		fmt.Fprintf(out, "%s\n", m.Data)
	}
	return nil
}

// printHeaders prints headers one per line, indented, keys sorted.
func printHeaders(out io.Writer, h tern.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(out, "  %s: %s\n", k, v)
		}
	}
}
