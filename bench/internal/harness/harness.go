// Package harness is the command-line plumbing the bench module's commands share:
// a main whose context ends on SIGINT or SIGTERM, sub-command dispatch, and the
// comma-separated lists and sizes their flags take. The shell drivers (bench/*.sh)
// call these commands; what each command measures stays in its own package.
package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Func is a command's body: it reads its arguments, writes results to stdout and
// progress to stderr.
type Func func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs run with the process's arguments and a context that a signal cancels,
// so a driver stopping the harness by pid lets it clean up. An error is printed as
// "name: error" with exit status 1; --help (flag.ErrHelp) exits 0.
func Main(name string, run Func) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Dispatch runs the sub-command args[0] names with the rest of args. help, -h,
// -help and --help print usage on stdout; no command or an unknown one prints it on
// stderr and is an error.
func Dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, usage string, cmds map[string]Func) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if cmd, ok := cmds[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// SplitList is the non-empty, trimmed entries of a comma-separated list.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ParsePIDs reads a comma-separated list of process ids, each positive.
func ParsePIDs(s string) ([]int, error) {
	var out []int
	for _, p := range SplitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad pid %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseInts reads a comma-separated list of whole numbers.
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, v := range SplitList(s) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseBytes reads a positive size: 1073741824, 1GiB, 256MiB, 4MiB, 512KiB (also G,
// M, K, GB, MB, KB as powers of 1024).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GiB, 256MiB, 4194304)", s)
	}
	return int64(v * float64(mult)), nil
}

// RunOrder is the order run n (from 0) takes the systems in: as given on even runs,
// reversed on odd ones, so that no system always runs first, on a machine the other
// has just left.
func RunOrder[T any](systems []T, n int) []T {
	order := slices.Clone(systems)
	if n%2 == 1 {
		slices.Reverse(order)
	}
	return order
}
