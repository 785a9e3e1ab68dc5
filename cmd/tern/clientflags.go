package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	tern "github.com/tern-mq/tern/client/go"
)

// clientFlags are the connection options every client subcommand takes.
type clientFlags struct {
	server  string
	name    string
	creds   string
	timeout time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet, defaultName string) {
	def := os.Getenv("TERN_URL")
	if def == "" {
		def = tern.DefaultURL
	}
	fs.StringVar(&c.server, "server", def, "server URL(s), comma-separated (env TERN_URL)")
	fs.StringVar(&c.name, "name", defaultName, "connection name shown in monitoring")
	fs.StringVar(&c.creds, "creds", "", "credentials sent in CONNECT")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "connect and request timeout")
}

func (c *clientFlags) connect(extra ...tern.Option) (*tern.Conn, error) {
	opts := []tern.Option{tern.Name(c.name), tern.Timeout(c.timeout)}
	if c.creds != "" {
		opts = append(opts, tern.Credentials([]byte(c.creds)))
	}
	nc, err := tern.Connect(c.server, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.server, err)
	}
	return nc, nil
}

// headerFlag collects repeated --header key=value options.
type headerFlag struct{ h tern.Header }

func (f *headerFlag) String() string { return "" }

func (f *headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q: want key=value", v)
	}
	if f.h == nil {
		f.h = tern.Header{}
	}
	f.h.Add(k, val)
	return nil
}

func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("tern "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tern %s\n\nOptions:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}
