// Command tern is Tern's one binary: `tern server` runs the broker, the other
// subcommands are the command-line client (pub, sub, req, reply, bench).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// command is one subcommand. run gets the arguments after the subcommand name and a
// context cancelled on SIGINT/SIGTERM.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

// register adds a subcommand; each subcommand's file registers itself in init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("duplicate command " + c.name)
	}
	commands[c.name] = c
}

func init() {
	register(command{name: "version", summary: "print the version", run: func(context.Context, []string) error {
		fmt.Println("tern", version)
		return nil
	}})
}

func usage() {
	fmt.Fprintf(os.Stderr, "Tern %s — a lightweight, fast message broker.\n\nUsage: tern <command> [options]\n\nCommands:\n", version)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'tern <command> --help' for the options of a command.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "tern: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, os.Args[2:])
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintf(os.Stderr, "tern %s: %v\n", cmd.name, err)
		os.Exit(1)
	}
}
