package tern

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/tern-mq/tern/internal/tlsconf"
)

// tlsPrefix marks a server reached over TLS (URL scheme tls://).
const tlsPrefix = "tls://"

// TLSConfig is the TLS configuration of tls:// connections: the CA pool the
// server's certificate is verified against (RootCAs; the system's roots when nil),
// the client certificate a server that asks for one gets, and so on. It is cloned;
// the other TLS options apply over it. A ServerName left empty is the host of the
// URL dialled. tern:// and udp:// connections ignore it.
func TLSConfig(cfg *tls.Config) Option { return func(o *Options) { o.TLSConfig = cfg } }

// TLSCAFile names a PEM file of the certificate authorities that the server's
// certificate must chain to, for tls:// connections (default: the system's roots).
func TLSCAFile(file string) Option { return func(o *Options) { o.TLSCAFile = file } }

// TLSRootCAs is TLSCAFile with the certificates already in a pool.
func TLSRootCAs(pool *x509.CertPool) Option { return func(o *Options) { o.TLSRootCAs = pool } }

// TLSClientCert names the PEM files of the certificate (and its key) presented to
// a server that asks tls:// clients for one (tls_client_auth).
func TLSClientCert(certFile, keyFile string) Option {
	return func(o *Options) { o.TLSCertFile, o.TLSKeyFile = certFile, keyFile }
}

// TLSServerName is the name the server's certificate must carry, when it is not
// the host of the URL (an IP address, a name behind a proxy).
func TLSServerName(name string) Option { return func(o *Options) { o.TLSServerName = name } }

// tlsConfig builds the configuration of tls:// connections from the options,
// reading the files they name.
func (o *Options) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSConfig != nil {
		cfg = o.TLSConfig.Clone()
	}
	if o.TLSRootCAs != nil {
		cfg.RootCAs = o.TLSRootCAs
	}
	if o.TLSCAFile != "" {
		b, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS CA file: %w", ErrBadOption, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: TLS CA file %q: no PEM certificate found", ErrBadOption, o.TLSCAFile)
		}
		cfg.RootCAs = pool
	}
	if o.TLSCertFile != "" || o.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS client certificate %q, key %q: %w", ErrBadOption, o.TLSCertFile, o.TLSKeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.TLSServerName != "" {
		cfg.ServerName = o.TLSServerName
	}
	return cfg, nil
}

// dialTLS connects to addr (host:port) and completes the TLS handshake within
// the connection timeout.
func (c *Conn) dialTLS(addr string) (net.Conn, error) {
	cfg := c.tlsCfg
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.ServerName = strings.Trim(host, "[]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := tlsconf.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return tc, nil
}
