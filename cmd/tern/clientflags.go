package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	tern "github.com/tern-mq/tern/client/go"
)

// clientFlags are the connection options every client command takes.
type clientFlags struct {
	fs      *pflag.FlagSet
	server  string
	context string
	name    string
	creds   string
	timeout time.Duration
	udpKey  string
	udpPSK  string
	// tls:// servers: the CA file to verify them with, the client certificate.
	tlsCA, tlsCert, tlsKey string
}

// registerServer adds --server and --context only (tern bench).
func (c *clientFlags) registerServer(cmd *cobra.Command) {
	c.fs = cmd.Flags()
	c.fs.StringVar(&c.server, "server", tern.DefaultURL, "server `URL`s, comma-separated")
	_ = c.fs.SetAnnotation("server", defaultAnnotation, []string{"$TERN_URL, else the context's, else " + tern.DefaultURL})
	registerContextFlag(cmd, &c.context, "take the server and options from this saved `context` (tern context)")
}

// register adds every connection option.
func (c *clientFlags) register(cmd *cobra.Command, defaultName string) {
	c.registerServer(cmd)
	fs := c.fs
	fs.StringVar(&c.name, "name", defaultName, "connection name shown in monitoring")
	fs.StringVar(&c.creds, "creds", "", "`credentials` sent in CONNECT")
	_ = fs.SetAnnotation("creds", defaultAnnotation, []string{"the context's, else none"})
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "connect and request timeout")
	fs.StringVar(&c.udpKey, "udp-key", "", "the server's public `key` (tern udp-keygen): udp:// sessions are encrypted")
	_ = fs.SetAnnotation("udp-key", defaultAnnotation, []string{"$TERN_UDP_KEY, else the context's, else none"})
	fs.StringVar(&c.udpPSK, "udp-psk-file", "", "`file` with the pre-shared key of a server that has udp_psk_file")
	_ = fs.SetAnnotation("udp-psk-file", defaultAnnotation, []string{"the context's, else none"})
	registerTLSFlags(fs, &c.tlsCA, &c.tlsCert, &c.tlsKey)
	for _, f := range []string{"tls-ca", "tls-cert", "tls-key"} {
		_ = fs.SetAnnotation(f, defaultAnnotation, []string{"the context's, else none"})
	}
}

// registerTLSFlags adds the TLS options of tls:// servers.
func registerTLSFlags(fs *pflag.FlagSet, ca, cert, key *string) {
	fs.StringVar(ca, "tls-ca", "", "PEM `file` of the CA that tls:// servers' certificates must chain to (default: the system's)")
	fs.StringVar(cert, "tls-cert", "", "PEM `file` of the client certificate for tls:// servers that ask for one (needs --tls-key)")
	fs.StringVar(key, "tls-key", "", "PEM `file` of the client certificate's private key")
}

// resolve fills in what the command line left unset: from the environment
// (TERN_URL, TERN_UDP_KEY), then from the context (--context, else the selected
// one). A context that cannot be read is an error even when it would not be used,
// so that a typo in --context does not go unnoticed.
func (c *clientFlags) resolve() error {
	ctx, _, err := contextFor(c.context)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = &ternContext{}
	}
	pick := func(flag string, dst *string, env, fromContext string) {
		switch {
		case c.fs.Lookup(flag) == nil || c.fs.Changed(flag):
		case env != "" && os.Getenv(env) != "":
			*dst = os.Getenv(env)
		case fromContext != "":
			*dst = fromContext
		}
	}
	pick("server", &c.server, "TERN_URL", ctx.Server)
	pick("creds", &c.creds, "", ctx.Creds)
	pick("udp-key", &c.udpKey, "TERN_UDP_KEY", ctx.UDPKey)
	pick("udp-psk-file", &c.udpPSK, "", ctx.UDPPSKFile)
	pick("tls-ca", &c.tlsCA, "", ctx.TLSCA)
	pick("tls-cert", &c.tlsCert, "", ctx.TLSCert)
	pick("tls-key", &c.tlsKey, "", ctx.TLSKey)
	return nil
}

func (c *clientFlags) connect(extra ...tern.Option) (*tern.Conn, error) {
	if err := c.resolve(); err != nil {
		return nil, err
	}
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
	if c.tlsCA != "" {
		opts = append(opts, tern.TLSCAFile(c.tlsCA))
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, usageErrorf("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		opts = append(opts, tern.TLSClientCert(c.tlsCert, c.tlsKey))
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
func (f *headerFlag) Type() string   { return "key=value" }

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
