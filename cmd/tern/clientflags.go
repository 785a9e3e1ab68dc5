package main

import (
	"flag"
	"fmt"
	"io"
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
	udpKey  string
	udpPSK  string
}

func (c *clientFlags) register(fs *flag.FlagSet, defaultName string) {
	def := os.Getenv("TERN_URL")
	if def == "" {
		def = tern.DefaultURL
	}
	fs.StringVar(&c.server, "server", def, "server `URL`s, comma-separated (env TERN_URL)")
	fs.StringVar(&c.name, "name", defaultName, "connection name shown in monitoring")
	fs.StringVar(&c.creds, "creds", "", "`credentials` sent in CONNECT")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "connect and request timeout")
	fs.StringVar(&c.udpKey, "udp-key", os.Getenv("TERN_UDP_KEY"), "the server's public `key` (tern udp-keygen): udp:// sessions are encrypted (env TERN_UDP_KEY)")
	fs.StringVar(&c.udpPSK, "udp-psk-file", "", "`file` with the pre-shared key of a server that has udp_psk_file")
}

func (c *clientFlags) connect(extra ...tern.Option) (*tern.Conn, error) {
	opts := []tern.Option{tern.Name(c.name), tern.Timeout(c.timeout)}
	if c.creds != "" {
		opts = append(opts, tern.Credentials([]byte(c.creds)))
	}
	if c.udpKey != "" {
		k, err := tern.ParseUDPKey(c.udpKey)
		if err != nil {
			return nil, fmt.Errorf("--udp-key: %w", err)
		}
		opts = append(opts, tern.UDPServerKey(k))
	}
	if c.udpPSK != "" {
		b, err := os.ReadFile(c.udpPSK)
		if err != nil {
			return nil, fmt.Errorf("--udp-psk-file: %w", err)
		}
		k, err := tern.ParseUDPKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("--udp-psk-file %s: %w", c.udpPSK, err)
		}
		opts = append(opts, tern.UDPPreSharedKey(k))
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

// flagOutput, when set, receives usage and flag errors instead of stderr (tests).
var flagOutput io.Writer

// newFlagSet makes a subcommand's flag set whose --help lists every option with its
// default, zero values included.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("tern "+name, flag.ContinueOnError)
	if flagOutput != nil {
		fs.SetOutput(flagOutput)
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: tern %s\n\nOptions:\n", usage)
		fs.VisitAll(func(f *flag.Flag) {
			kind, help := flag.UnquoteUsage(f)
			def := f.DefValue
			if g, ok := f.Value.(flag.Getter); !ok {
				def = "none"
			} else if _, isString := g.Get().(string); isString {
				def = fmt.Sprintf("%q", def)
			}
			if kind != "" {
				kind = " " + kind
			}
			fmt.Fprintf(w, "  --%s%s\n    \t%s (default %s)\n", f.Name, kind, help, def)
		})
	}
	return fs
}
