// Command tern is Tern's one binary: `tern server` runs the broker, the other
// commands are the command-line client (pub, sub, req, reply, bench, stream,
// consumer), the cluster view (cluster), its saved connection contexts and tools
// (udp-keygen, completion).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tern-mq/tern/internal/cliflags"
	"github.com/tern-mq/tern/internal/server"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line was wrong
)

// usageError is a wrong command line: an unknown command or option, a bad option
// value, the wrong number of arguments. It exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// errUsageShown is a usage error whose usage has been printed already.
var errUsageShown = usageError{errors.New("usage shown")}

// run executes one command line and returns its exit status: 0, 1 when the
// command fails, 2 when the command line is wrong. Errors go to stderr as
// "tern <command>: <error>".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd, err := execute(ctx, args, stdin, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsageShown):
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitFailure
}

// execute runs one command line and returns the command that ran (or would have)
// and its error.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (*cobra.Command, error) {
	root := newRootCmd()
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(goStyleArgs(root, args))
	return root.ExecuteContextC(ctx)
}

// goStyleArgs accepts the single-dash long options of the commands' Go flag days
// (-count 5, -psk) by rewriting them for the command that args name.
func goStyleArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	fs.AddFlagSet(cmd.InheritedFlags())
	if fs.Lookup("help") == nil {
		fs.Bool("help", false, "")
	}
	return cliflags.GoStyleArgs(fs, args)
}

const rootLong = `Tern is a lightweight, fast message broker: a low-latency bus (subjects,
queue groups, request/reply, filters), durable streams and consumers, and an
MQTT broker, in one binary. 'tern server' runs it; the other commands are its
command-line client.`

const rootExample = `  tern server &                                  # broker on :7400, HTTP on :7480
  tern sub 'sensors.>'                           # print what is published under sensors.
  tern pub sensors.k1.temp 21.5
  tern context add prod --server tern://broker.example:7400 --select
  tern stream add ORDERS --subjects 'orders.>'`

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tern",
		Short:         "A lightweight, fast message broker and its command-line client",
		Long:          rootLong,
		Example:       rootExample,
		Version:       version,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          showUsage,
	}
	root.SetVersionTemplate("tern {{.Version}}\n")
	root.SetUsageFunc(usage)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{flagError(err)} })
	root.AddGroup(
		&cobra.Group{ID: "server", Title: "Server:"},
		&cobra.Group{ID: "client", Title: "Messaging:"},
		&cobra.Group{ID: "streams", Title: "Streams:"},
		&cobra.Group{ID: "setup", Title: "Setup:"},
	)
	root.SetHelpCommandGroupID("setup")
	root.SetCompletionCommandGroupID("setup")
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("server", newServerCmd(), newClusterCmd())
	add("client", newPubCmd(), newSubCmd(), newReqCmd(), newReplyCmd(), newBenchCmd(nil))
	add("streams", newStreamCmd(), newConsumerCmd())
	add("setup", newContextCmd(), newUDPKeygenCmd(), newPasswdCmd(), newVersionCmd())
	walk(root, func(c *cobra.Command) {
		c.DisableFlagsInUseLine = true // Use says [options]
		c.SuggestionsMinimumDistance = 2
	})
	return root
}

// walk calls fn for cmd and every command under it.
func walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, c := range cmd.Commands() {
		walk(c, fn)
	}
}

// showUsage is the action of a command that needs a subcommand: it prints the
// usage to stderr and exits with status 2.
func showUsage(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(cmd.ErrOrStderr())
	_ = cmd.Help()
	return errUsageShown
}

// groupArgs refuses arguments that name no subcommand of a command group, and
// suggests the ones they may have meant.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, ", "))
	}
	return usageError{errors.New(msg)}
}

// argsBetween accepts from lo to hi positional arguments; else msg is the error.
func argsBetween(lo, hi int, msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) >= lo && len(args) <= hi:
			return nil
		case len(args) > hi && hi == 0:
			return usageErrorf("unexpected argument %q", args[0])
		case len(args) > hi:
			return usageErrorf("too many arguments: %s", strings.Join(args, " "))
		}
		return usageError{errors.New(msg)}
	}
}

// flagError rewrites pflag's message for a bad option value when the value type
// says itself what it accepts.
func flagError(err error) error {
	var inv *pflag.InvalidValueError
	if !errors.As(err, &inv) {
		return err
	}
	cause := errors.Unwrap(inv)
	if oe := (*server.OptionError)(nil); errors.As(cause, &oe) {
		return oe
	}
	if ve := (*cliflags.ValueError)(nil); errors.As(cause, &ve) {
		return fmt.Errorf("--%s: %w", inv.GetFlag().Name, ve)
	}
	return err
}

// usage writes a command's usage: its usage line, subcommands, examples and
// options with their types and defaults.
func usage(cmd *cobra.Command) error {
	w := cmd.OutOrStderr()
	fmt.Fprint(w, "Usage:")
	if !cmd.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n  %s", cmd.UseLine())
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n  %s <command>", cmd.CommandPath())
	}
	if len(cmd.Aliases) > 0 {
		fmt.Fprintf(w, "\n\nAliases:\n  %s", cmd.NameAndAliases())
	}
	if cmd.HasAvailableSubCommands() {
		printCommands(w, cmd)
	}
	if cmd.HasExample() {
		fmt.Fprintf(w, "\n\nExamples:\n%s", cmd.Example)
	}
	if cmd.HasAvailableLocalFlags() {
		fmt.Fprintf(w, "\n\nOptions:\n%s", flagUsages(cmd.LocalFlags()))
	}
	if cmd.HasAvailableInheritedFlags() {
		fmt.Fprintf(w, "\n\nGlobal options:\n%s", flagUsages(cmd.InheritedFlags()))
	}
	if cmd.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\n\nRun '%s <command> --help' for the options of a command.", cmd.CommandPath())
	}
	fmt.Fprintln(w)
	return nil
}

func printCommands(w io.Writer, cmd *cobra.Command) {
	section := func(title, group string) {
		var lines []string
		for _, c := range cmd.Commands() {
			if c.GroupID == group && (c.IsAvailableCommand() || c.Name() == "help") {
				lines = append(lines, fmt.Sprintf("  %-*s %s", c.NamePadding(), c.Name(), c.Short))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n\n%s\n%s", title, strings.Join(lines, "\n"))
		}
	}
	if len(cmd.Groups()) == 0 {
		section("Commands:", "")
		return
	}
	for _, g := range cmd.Groups() {
		section(g.Title, g.ID)
	}
	section("Other commands:", "")
}

// defaultAnnotation, on a flag, is the text its help shows as its default.
const defaultAnnotation = "tern_default"

// flagUsages lists options with their types, help and defaults, zero values
// included (the help and version switches have none).
func flagUsages(fs *pflag.FlagSet) string {
	type row struct{ left, right string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		left := "      --" + f.Name
		if f.Shorthand != "" {
			left = "  -" + f.Shorthand + ", --" + f.Name
		}
		name, help := pflag.UnquoteUsage(f)
		if name != "" {
			left += " " + name
		}
		switch {
		case f.Name == "help" || f.Name == "version":
		case len(f.Annotations[defaultAnnotation]) > 0:
			help += " (default " + f.Annotations[defaultAnnotation][0] + ")"
		case f.Value.Type() == "string":
			help += fmt.Sprintf(" (default %q)", f.DefValue)
		case f.DefValue == "":
			help += " (default none)"
		default:
			help += " (default " + f.DefValue + ")"
		}
		rows = append(rows, row{left, help})
		width = max(width, len(left))
	})
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%-*s   %s", width, r.left, r.right)
	}
	return b.String()
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  argsBetween(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "tern", version)
			return nil
		},
	}
}
