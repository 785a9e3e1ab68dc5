package main

import (
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
	"github.com/tern-mq/tern/internal/cliflags"
	"github.com/tern-mq/tern/internal/wire"
)

const streamLong = `Manages durable streams: a stream captures the messages published on its
subjects into a log on the server's disk (store_dir). See docs/cli-streams.md.`

func newStreamCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stream <command>",
		Short: "Manage durable streams (add, edit, ls, info, rm, purge, get)",
		Long:  streamLong,
		Example: `  tern stream add ORDERS --subjects 'orders.>' --max-age 24h
  tern stream edit ORDERS --max-age 48h
  tern stream ls
  tern stream info ORDERS
  tern stream get ORDERS --seq 1
  tern stream rm -f ORDERS`,
		Args: groupArgs,
		RunE: showUsage,
	}
	cmd.AddCommand(newStreamAddCmd(), newStreamEditCmd(), newStreamListCmd(), newStreamInfoCmd(), newStreamRemoveCmd(), newStreamPurgeCmd(), newStreamGetCmd())
	return cmd
}

// streamsConn connects and returns the stream API, its requests bounded by --timeout.
func streamsConn(cf *clientFlags) (*tern.Conn, *tern.Streams, error) {
	nc, err := cf.connect()
	if err != nil {
		return nil, nil, err
	}
	return nc, nc.Streams(tern.APITimeout(cf.timeout)), nil
}

// withStreams makes the RunE of a command that works on the stream API: it connects
// with the command's client flags, runs fn and closes the connection.
func withStreams(cf *clientFlags, fn func(cmd *cobra.Command, args []string, js *tern.Streams) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		nc, js, err := streamsConn(cf)
		if err != nil {
			return err
		}
		defer nc.Close()
		return fn(cmd, args, js)
	}
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

func newStreamAddCmd() *cobra.Command {
	var (
		cf                         clientFlags
		subjects                   string
		cfg                        tern.StreamConfig
		retention                  = string(tern.RetainLimits)
		maxAge, dupeWindow, segAge time.Duration
		maxBytes, maxMsgSize, segs int64
		compact                    bool
		minLag, maxLag, tombstones time.Duration
		asJSON                     bool
	)
	cfg.Discard = "old"
	cmd := &cobra.Command{
		Use:   "add <name> [options]",
		Short: "Create a stream (or confirm an identical one exists)",
		Example: `  tern stream add ORDERS --subjects 'orders.>' --max-age 24h --max-bytes 1GiB --dupe-window 5m
  tern stream add JOBS --retention workqueue --partitions 4 --max-msgs 1000000 --discard new
  tern stream add AUDIT --subjects 'audit.>' --sync always --segment-size 16MiB --json
  tern stream add LOGS --subjects 'logs.>' --compression s2 --max-bytes 10GiB
  tern stream add PROFILES --subjects 'profiles.>' --compact --tombstone-retention 1h`,
		Args: argsBetween(1, 1, "want a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Name = args[0]
			cfg.Retention = tern.Retention(retention)
			cfg.MaxAge, cfg.DuplicateWindow = tern.Duration(maxAge), tern.Duration(dupeWindow)
			cfg.MaxBytes, cfg.MaxMsgSize, cfg.SegmentBytes, cfg.SegmentAge = maxBytes, int(maxMsgSize), segs, tern.Duration(segAge)
			for _, s := range strings.Split(subjects, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.Subjects = append(cfg.Subjects, s)
				}
			}
			if len(cfg.Subjects) == 0 {
				cfg.Subjects = []string{cfg.Name}
			}
			if cfg.Partitions < 1 || maxAge < 0 || dupeWindow < 0 || segAge < 0 {
				return usageErrorf("--partitions must be at least 1, --max-age, --dupe-window and --segment-age not negative")
			}
			if r := cfg.Replicas; r != 0 && r != 1 && r != 3 && r != 5 {
				return usageErrorf("--replicas must be 1, 3 or 5")
			}
			if compact {
				if minLag < 0 || maxLag < 0 || tombstones < 0 {
					return usageErrorf("--compact-min-lag, --compact-max-lag and --tombstone-retention must not be negative")
				}
				cfg.Compact = &tern.Compaction{MinLag: tern.Duration(minLag), MaxLag: tern.Duration(maxLag), TombstoneRetention: tern.Duration(tombstones)}
			} else if fs := cmd.Flags(); fs.Changed("compact-min-lag") || fs.Changed("compact-max-lag") || fs.Changed("tombstone-retention") {
				return usageErrorf("--compact-min-lag, --compact-max-lag and --tombstone-retention need --compact")
			}
			nc, js, err := streamsConn(&cf)
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			// Creating an identical stream again succeeds; say so rather than "created".
			_, existed := js.StreamInfo(ctx, cfg.Name)
			info, err := js.AddStream(ctx, cfg)
			if err != nil {
				return fmt.Errorf("create stream %q: %w", cfg.Name, streamErr(err, cfg.Name))
			}
			if asJSON {
				return printJSON(out, info)
			}
			if existed == nil {
				fmt.Fprintf(out, "Stream %s already exists with this configuration\n\n", info.Config.Name)
			} else {
				fmt.Fprintf(out, "Stream %s created\n\n", info.Config.Name)
			}
			printStreamInfo(out, info)
			return nil
		},
	}
	cf.register(cmd, "tern-stream")
	fs := cmd.Flags()
	fs.StringVar(&subjects, "subjects", "", "comma-separated `subjects` to capture, wildcards allowed")
	_ = fs.SetAnnotation("subjects", defaultAnnotation, []string{"the stream name"})
	enumFlag(cmd, &retention, "retention", "what removes messages besides the limits", string(tern.RetainLimits), string(tern.RetainWorkQueue), string(tern.RetainInterest))
	fs.DurationVar(&maxAge, "max-age", 0, "remove messages older than this, e.g. 1h (0 = no limit)")
	fs.Var(cliflags.NewByteSize(&maxBytes), "max-bytes", "size limit over all partitions, e.g. 1GiB (0 = no limit)")
	fs.Uint64Var(&cfg.MaxMsgs, "max-msgs", 0, "message count limit over all partitions (0 = no limit)")
	fs.Var(cliflags.NewByteSize(&maxMsgSize), "max-msg-size", "largest payload accepted, e.g. 64KiB (0 = the server's max_payload)")
	enumFlag(cmd, &cfg.Discard, "discard", "at a limit: old removes the oldest messages, new refuses new ones", "old", "new")
	fs.IntVar(&cfg.Partitions, "partitions", 1, "independent ordered logs; a message's partition comes from its key or subject")
	fs.IntVar(&cfg.Replicas, "replicas", 0, "nodes of a cluster that keep the stream: 1, 3 or 5 (needs cluster_size; 0 = the server's stream_replicas)")
	fs.DurationVar(&dupeWindow, "dupe-window", 0, "how long message ids are remembered for duplicate detection (0 = 2m)")
	enumFlag(cmd, &cfg.Sync, "sync", "fsync policy of this stream", "always", "interval", "never")
	_ = fs.SetAnnotation("sync", defaultAnnotation, []string{"the server's"})
	fs.Var(cliflags.NewByteSize(&segs), "segment-size", "segment file size, e.g. 64MiB (0 = the server's segment_size)")
	fs.DurationVar(&segAge, "segment-age", 0, "also start a new segment once the last one's first message is this old, e.g. 1h (0 = by size alone)")
	// Left empty rather than "none" when not given, so that adding a stream
	// again without the option matches one made by the API without the field.
	compressionFlag(cmd, &cfg.Compression)
	fs.BoolVar(&compact, "compact", false, "keep only each key's latest message (its Tern-Key header, else its subject)")
	fs.DurationVar(&minLag, "compact-min-lag", 0, "with --compact: keep every message at least this long")
	fs.DurationVar(&maxLag, "compact-max-lag", 0, "with --compact: seal the head segment, which is never compacted, once its first message is this old (0 = 168h)")
	fs.DurationVar(&tombstones, "tombstone-retention", 0, "with --compact: how long a tombstone (Tern-Null-Value header) is kept (0 = 24h)")
	fs.BoolVar(&asJSON, "json", false, "print the stream info as JSON")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern stream edit

func newStreamEditCmd() *cobra.Command {
	var (
		cf                         clientFlags
		subjects, discard          string
		maxAge, dupeWindow         time.Duration
		maxBytes, maxMsgSize       int64
		maxMsgs                    uint64
		replicas, partitions       int
		compression                string
		compact                    bool
		minLag, maxLag, tombstones time.Duration
		segAge                     time.Duration
		asJSON                     bool
	)
	cmd := &cobra.Command{
		Use:   "edit <name> [options]",
		Short: "Change a stream's subjects, limits, compression, compaction, partition count (up only) or replica count (the options given, the rest as they are)",
		Example: `  tern stream edit ORDERS --max-age 48h --max-bytes 2GiB
  tern stream edit ORDERS --subjects 'orders.>,returns.>'
  tern stream edit ORDERS --compression s2
  tern stream edit PROFILES --compact --tombstone-retention 1h
  tern stream edit PROFILES --compact=false
  tern stream edit ORDERS --partitions 8
  tern stream edit ORDERS --replicas 5`,
		Args: argsBetween(1, 1, "want a stream name"),
		RunE: withStreams(&cf, func(cmd *cobra.Command, args []string, js *tern.Streams) error {
			ctx, fs := cmd.Context(), cmd.Flags()
			info, err := js.StreamInfo(ctx, args[0])
			if err != nil {
				return streamErr(err, args[0])
			}
			cfg := info.Config
			if fs.Changed("subjects") {
				cfg.Subjects = nil
				for _, s := range strings.Split(subjects, ",") {
					if s = strings.TrimSpace(s); s != "" {
						cfg.Subjects = append(cfg.Subjects, s)
					}
				}
				if len(cfg.Subjects) == 0 {
					return usageErrorf("--subjects wants at least one subject")
				}
			}
			if fs.Changed("max-age") {
				if maxAge < 0 {
					return usageErrorf("--max-age must not be negative")
				}
				cfg.MaxAge = tern.Duration(maxAge)
			}
			if fs.Changed("segment-age") {
				if segAge < 0 {
					return usageErrorf("--segment-age must not be negative")
				}
				cfg.SegmentAge = tern.Duration(segAge)
			}
			if fs.Changed("dupe-window") {
				if dupeWindow < 0 {
					return usageErrorf("--dupe-window must not be negative")
				}
				cfg.DuplicateWindow = tern.Duration(dupeWindow)
			}
			if fs.Changed("max-bytes") {
				cfg.MaxBytes = maxBytes
			}
			if fs.Changed("max-msgs") {
				cfg.MaxMsgs = maxMsgs
			}
			if fs.Changed("max-msg-size") {
				cfg.MaxMsgSize = int(maxMsgSize)
			}
			if fs.Changed("discard") {
				cfg.Discard = discard
			}
			if fs.Changed("compression") {
				cfg.Compression = compression
			}
			lags := fs.Changed("compact-min-lag") || fs.Changed("compact-max-lag") || fs.Changed("tombstone-retention")
			if fs.Changed("compact") && !compact {
				if lags {
					return usageErrorf("--compact-min-lag, --compact-max-lag and --tombstone-retention need compaction on")
				}
				if cfg.Compact != nil {
					// Off, its settings kept for when it is switched on again.
					c := *cfg.Compact
					c.Off = true
					cfg.Compact = &c
				}
			} else if compact || lags {
				if cfg.Compaction() == nil && !compact {
					return usageErrorf("the stream is not compacted: add --compact")
				}
				if minLag < 0 || maxLag < 0 || tombstones < 0 {
					return usageErrorf("--compact-min-lag, --compact-max-lag and --tombstone-retention must not be negative")
				}
				c := tern.Compaction{}
				if cfg.Compact != nil {
					c = *cfg.Compact // its settings, if it was switched off
				}
				c.Off = false
				if fs.Changed("compact-min-lag") {
					c.MinLag = tern.Duration(minLag)
				}
				if fs.Changed("compact-max-lag") {
					c.MaxLag = tern.Duration(maxLag)
				}
				if fs.Changed("tombstone-retention") {
					c.TombstoneRetention = tern.Duration(tombstones)
				}
				cfg.Compact = &c
			}
			if fs.Changed("partitions") {
				if partitions < max(cfg.Partitions, 1) {
					return usageErrorf("--partitions %d: the stream has %d, and partitions can be added, not removed", partitions, max(cfg.Partitions, 1))
				}
				cfg.Partitions = partitions
			}
			if fs.Changed("replicas") {
				if replicas != 1 && replicas != 3 && replicas != 5 {
					return usageErrorf("--replicas must be 1, 3 or 5")
				}
				cfg.Replicas = replicas
			}
			updated, err := js.UpdateStream(ctx, cfg)
			if err != nil {
				return fmt.Errorf("edit stream %q: %w", cfg.Name, streamErr(err, cfg.Name))
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), updated)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stream %s updated\n\n", updated.Config.Name)
			printStreamInfo(cmd.OutOrStdout(), updated)
			return nil
		}),
	}
	cf.register(cmd, "tern-stream")
	fs := cmd.Flags()
	fs.StringVar(&subjects, "subjects", "", "comma-separated `subjects` to capture instead of the current ones")
	fs.DurationVar(&maxAge, "max-age", 0, "remove messages older than this, e.g. 1h (0 = no limit)")
	fs.Var(cliflags.NewByteSize(&maxBytes), "max-bytes", "size limit over all partitions, e.g. 1GiB (0 = no limit)")
	fs.Uint64Var(&maxMsgs, "max-msgs", 0, "message count limit over all partitions (0 = no limit)")
	fs.Var(cliflags.NewByteSize(&maxMsgSize), "max-msg-size", "largest payload accepted, e.g. 64KiB (0 = the server's max_payload)")
	enumFlag(cmd, &discard, "discard", "at a limit: old removes the oldest messages, new refuses new ones", "old", "new")
	fs.DurationVar(&dupeWindow, "dupe-window", 0, "how long message ids are remembered (0 = 2m)")
	fs.IntVar(&replicas, "replicas", 0, "nodes of the cluster that keep the stream: 3 or 5 (a stream of 1 stays 1)")
	fs.IntVar(&partitions, "partitions", 0, "partition count to grow to: new partitions start empty, the old ones keep their messages")
	compressionFlag(cmd, &compression)
	fs.BoolVar(&compact, "compact", false, "keep only each key's latest message (switched on, the stream learns the keys of the messages it holds); --compact=false switches it off, keeping its settings for when it is switched on again")
	fs.DurationVar(&minLag, "compact-min-lag", 0, "keep every message at least this long (compacted streams)")
	fs.DurationVar(&maxLag, "compact-max-lag", 0, "seal the head segment once its first message is this old (compacted streams; 0 = 168h)")
	fs.DurationVar(&segAge, "segment-age", 0, "also start a new segment once the last one's first message is this old (0 = by size alone)")
	fs.DurationVar(&tombstones, "tombstone-retention", 0, "how long a tombstone is kept (compacted streams; 0 = 24h)")
	fs.BoolVar(&asJSON, "json", false, "print the stream info as JSON")
	return cmd
}

// compressionFlag adds --compression.
func compressionFlag(cmd *cobra.Command, p *string) {
	enumFlag(cmd, p, "compression", "how the stream's logs store messages: s2 writes compressed blocks of consecutive messages; a change applies to what is written next", "none", "s2")
}

// enumFlag adds an option taking one of values, completed by the shell.
func enumFlag(cmd *cobra.Command, p *string, name, help string, values ...string) {
	cmd.Flags().Var(cliflags.NewEnum(p, values...), name, help)
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// ---------------------------------------------------------------------------------
// tern stream ls

func newStreamListCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls [options]",
		Aliases: []string{"list"},
		Short:   "List the streams",
		Args:    argsBetween(0, 0, ""),
		RunE: withStreams(&cf, func(cmd *cobra.Command, _ []string, js *tern.Streams) error {
			out := cmd.OutOrStdout()
			list, err := js.ListStreams(cmd.Context())
			if err != nil {
				return fmt.Errorf("list streams: %w", streamErr(err, ""))
			}
			sort.Slice(list, func(i, j int) bool { return list[i].Config.Name < list[j].Config.Name })
			if asJSON {
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
		}),
	}
	cf.register(cmd, "tern-stream")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stream infos as a JSON array")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern stream info

func newStreamInfoCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "info <name> [options]",
		Short: "Describe a stream: its configuration and state",
		Args:  argsBetween(1, 1, "want a stream name"),
		RunE: withStreams(&cf, func(cmd *cobra.Command, args []string, js *tern.Streams) error {
			info, err := js.StreamInfo(cmd.Context(), args[0])
			if err != nil {
				return streamErr(err, args[0])
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), info)
			}
			printStreamInfo(cmd.OutOrStdout(), info)
			return nil
		}),
	}
	cf.register(cmd, "tern-stream")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stream info as JSON")
	return cmd
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
	if c.SegmentAge > 0 {
		fmt.Fprintf(tw, "  segment age:\t%s\n", time.Duration(c.SegmentAge))
	}
	fmt.Fprintf(tw, "  compression:\t%s\n", orDefault(c.Compression, "none"))
	if k := c.Compaction(); k != nil {
		head := "after " + tern.DefaultMaxLag.String()
		if k.MaxLag > 0 {
			head = "after " + time.Duration(k.MaxLag).String()
		}
		if c.SegmentAge > 0 && (k.MaxLag == 0 || c.SegmentAge < k.MaxLag) {
			head = "after " + time.Duration(c.SegmentAge).String()
		}
		fmt.Fprintf(tw, "  compacted:\tlatest per key, min lag %s, tombstones kept %s, head sealed %s\n", time.Duration(k.MinLag), time.Duration(k.TombstoneRetention), head)
	}
	fmt.Fprintf(tw, "State\n")
	fmt.Fprintf(tw, "  messages:\t%d\n", st.Msgs)
	fmt.Fprintf(tw, "  bytes:\t%s (files %s)\n", humanBytes(st.Bytes), humanBytes(st.FileBytes))
	if c.Compaction() != nil {
		fmt.Fprintf(tw, "  keys:\t%d\n", st.Keys)
	}
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
	if cl := info.Cluster; cl != nil {
		fmt.Fprintf(tw, "Cluster\n")
		fmt.Fprintf(tw, "  replicas:\t%d\n", max(c.Replicas, 1))
		if len(cl.Partitions) == 0 {
			printGroup(tw, "  ", *cl)
		}
		for i, pc := range cl.Partitions {
			fmt.Fprintf(tw, "  partition %d:\n", i)
			printGroup(tw, "    ", pc)
		}
	}
	_ = tw.Flush()
}

// printGroup prints one partition's Raft group as the stream's leader sees it.
func printGroup(tw io.Writer, indent string, cl tern.StreamCluster) {
	fmt.Fprintf(tw, "%sgroup:\t%016x\n", indent, cl.Group)
	fmt.Fprintf(tw, "%sleader:\t%s (term %d, applied %d)\n", indent, orDefault(cl.Leader, "none"), cl.Term, cl.Applied)
	for _, r := range cl.Replicas {
		state := "current"
		switch {
		case !r.Active:
			state = "not responding"
		case r.Lag > 0:
			state = fmt.Sprintf("%d entries behind", r.Lag)
		}
		role := "follower"
		if r.Leader {
			role = "leader"
		} else if r.Learner {
			role = "learner"
		}
		fmt.Fprintf(tw, "%s%s:\t%s, %s\n", indent, r.Node, role, state)
	}
}

// ---------------------------------------------------------------------------------
// tern stream rm

func newStreamRemoveCmd() *cobra.Command {
	var (
		cf    clientFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:     "rm <name> [options]",
		Short:   "Delete a stream, its messages and its consumers (needs --force)",
		Example: "  tern stream rm -f ORDERS",
		Args:    argsBetween(1, 1, "want a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return fmt.Errorf("deleting stream %q removes its messages and consumers; add --force (-f) to do it", args[0])
			}
			nc, js, err := streamsConn(&cf)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := js.DeleteStream(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("delete stream %q: %w", args[0], streamErr(err, args[0]))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stream %s deleted\n", args[0])
			return nil
		},
	}
	cf.register(cmd, "tern-stream")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "really delete the stream, its messages and its consumers")
	return cmd
}

// ---------------------------------------------------------------------------------
// tern stream purge

func newStreamPurgeCmd() *cobra.Command {
	var (
		cf        clientFlags
		req       tern.PurgeRequest
		partition int
	)
	cmd := &cobra.Command{
		Use:   "purge <name> [options]",
		Short: "Remove messages (all, or by --subject, --keep, --seq, --partition)",
		Example: `  tern stream purge ORDERS --subject orders.new --keep 1
  tern stream purge ORDERS`,
		Args: argsBetween(1, 1, "want a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Keep > 0 && req.UpTo > 0 {
				return usageErrorf("--keep and --seq exclude each other")
			}
			if cmd.Flags().Changed("partition") {
				if partition < 0 {
					return usageErrorf("--partition %d: partitions count from 0", partition)
				}
				req.Partition = &partition
			}
			nc, js, err := streamsConn(&cf)
			if err != nil {
				return err
			}
			defer nc.Close()
			n, err := js.PurgeStream(cmd.Context(), args[0], &req)
			if err != nil {
				return fmt.Errorf("purge stream %q: %w", args[0], streamErr(err, args[0]))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Purged %d %s from stream %s\n", n, plural(n, "message", "messages"), args[0])
			return nil
		},
	}
	cf.register(cmd, "tern-stream")
	fs := cmd.Flags()
	fs.StringVar(&req.Subject, "subject", "", "only messages on this subject (wildcards allowed)")
	fs.Uint64Var(&req.Keep, "keep", 0, "keep this many of the newest messages (per partition)")
	fs.Uint64Var(&req.UpTo, "seq", 0, "only messages below this sequence (per partition)")
	fs.IntVar(&partition, "partition", 0, "only this partition (from 0) of a partitioned stream (default every partition)")
	return cmd
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

func newStreamGetCmd() *cobra.Command {
	var (
		cf          clientFlags
		seq         uint64
		partition   int
		last        string
		raw, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "get <name> [options]",
		Short: "Read one stored message (--seq N [--partition P], or --last-subject S)",
		Example: `  tern stream get ORDERS --seq 1
  tern stream get ORDERS --last-subject orders.new --json`,
		Args: argsBetween(1, 1, "want a stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (seq == 0) == (last == "") {
				return usageErrorf("want exactly one of --seq N and --last-subject S")
			}
			nc, js, err := streamsConn(&cf)
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, out, name := cmd.Context(), cmd.OutOrStdout(), args[0]
			var m *tern.StoredMsg
			if last != "" {
				m, err = js.GetLastMsg(ctx, name, partition, last)
			} else {
				m, err = js.GetMsg(ctx, name, partition, seq)
			}
			if err != nil {
				return streamErr(err, name)
			}
			hdr := tern.Header{}
			wire.Header(m.Header).Each(func(k, v []byte) bool {
				hdr.Add(string(k), string(v))
				return true
			})
			switch {
			case asJSON:
				return printJSON(out, jsonStoredMsg{Stream: name, Partition: m.Partition, Seq: m.Seq, Subject: m.Subject,
					Time: m.Time, Headers: hdr, Data: string(m.Data), Size: len(m.Data)})
			case raw:
				fmt.Fprintf(out, "%s\n", m.Data)
			default:
				fmt.Fprintf(out, "[%s partition %d seq %d] %s (%d B) stored %s\n", name, m.Partition, m.Seq, m.Subject, len(m.Data), fmtTime(m.Time))
				printHeaders(out, hdr)
				fmt.Fprintf(out, "%s\n", m.Data)
			}
			return nil
		},
	}
	cf.register(cmd, "tern-stream")
	fs := cmd.Flags()
	fs.Uint64Var(&seq, "seq", 0, "sequence of the message in its partition")
	fs.IntVar(&partition, "partition", 0, "partition to read")
	fs.StringVar(&last, "last-subject", "", "read the last message stored on this subject (in --partition)")
	fs.BoolVar(&raw, "raw", false, "print only the payload")
	fs.BoolVar(&asJSON, "json", false, "print the message as JSON")
	return cmd
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
