// Package tlsconf owns Tern's TLS settings: it builds the *tls.Config of every TLS
// listener (and of outgoing connections) from the operator's files — certificate,
// key, certificate authority, revocation lists — with the standard library's
// crypto/tls and crypto/x509, reloads those files without dropping a connection,
// and wraps accepted connections so that their handshake runs in the connection's
// own goroutine, bounded in time. Every error names the file it comes from.
package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Settings are the TLS options of a server.
type Settings struct {
	CertFile string // PEM certificate chain, leaf first
	KeyFile  string // PEM private key of the certificate
	// CAFile holds the PEM certificates of the authorities that client
	// certificates must chain to (and, for ClientConfig, server certificates).
	CAFile string
	// CRLFile holds one or more revocation lists (PEM, or one DER list) signed by
	// a certificate of CAFile: a client certificate they list is refused.
	CRLFile string
	// ClientAuth is "none" (the default; no client certificate asked for),
	// "request" (asked for, not verified), "verify" (verified when given) or
	// "require" (required and verified).
	ClientAuth string
	// MinVersion is the oldest TLS version accepted: "1.2" (the default) or "1.3".
	MinVersion string
	// CipherSuites are the TLS 1.2 suites allowed, by their names in
	// tls.CipherSuites(); empty means Go's defaults. TLS 1.3 suites are not
	// configurable.
	CipherSuites []string
	// Check, when set, vets the certificate at every reading of the files (its
	// key usages, the names it carries): an error refuses it — New fails, and
	// Reload keeps the material in force.
	Check func(leaf *x509.Certificate) error
}

// ClientAuthModes are the values Settings.ClientAuth takes.
var ClientAuthModes = []string{"none", "request", "verify", "require"}

// MinVersions are the values Settings.MinVersion takes.
var MinVersions = []string{"1.2", "1.3"}

func parseClientAuth(s string) (tls.ClientAuthType, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return tls.NoClientCert, nil
	case "request":
		return tls.RequestClientCert, nil
	case "verify":
		return tls.VerifyClientCertIfGiven, nil
	case "require":
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("tls: client auth %q: want one of %s", s, strings.Join(ClientAuthModes, ", "))
}

func parseMinVersion(s string) (uint16, error) {
	switch s {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("tls: min version %q: want 1.2 or 1.3", s)
}

// parseCipherSuites turns suite names into ids. Insecure suites and TLS 1.3 suites
// (always on, not configurable in Go) are refused.
func parseCipherSuites(names []string) ([]uint16, error) {
	var ids []uint16
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if i := slices.IndexFunc(tls.InsecureCipherSuites(), func(cs *tls.CipherSuite) bool { return cs.Name == name }); i >= 0 {
			return nil, fmt.Errorf("tls: cipher suite %s is insecure and not allowed", name)
		}
		i := slices.IndexFunc(tls.CipherSuites(), func(cs *tls.CipherSuite) bool { return cs.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("tls: cipher suite %q unknown: want some of %s", name, strings.Join(CipherSuiteNames(), ", "))
		}
		cs := tls.CipherSuites()[i]
		if !slices.Contains(cs.SupportedVersions, tls.VersionTLS12) {
			return nil, fmt.Errorf("tls: cipher suite %s is a TLS 1.3 suite, always enabled: list TLS 1.2 suites only", name)
		}
		if !slices.Contains(ids, cs.ID) {
			ids = append(ids, cs.ID)
		}
	}
	return ids, nil
}

// CipherSuiteNames lists the TLS 1.2 cipher suites that Settings.CipherSuites may name.
func CipherSuiteNames() []string {
	var out []string
	for _, cs := range tls.CipherSuites() {
		if slices.Contains(cs.SupportedVersions, tls.VersionTLS12) {
			out = append(out, cs.Name)
		}
	}
	return out
}

// Store holds the TLS material read from the files of its Settings, and the
// configurations built from it. Reload reads the files again; the configurations
// it hands out pick the new material up for new handshakes only.
type Store struct {
	set        Settings
	clientAuth tls.ClientAuthType
	minVersion uint16
	suites     []uint16
	server     *tls.Config

	mu  sync.Mutex // serialises Reload
	cur atomic.Pointer[material]
}

// material is what one reading of the files gave.
type material struct {
	cert    tls.Certificate
	cas     *x509.CertPool // nil without a CA file
	revoked map[revokedKey]struct{}
	server  *tls.Config // the configuration of handshakes that start now
}

// revokedKey names a certificate as a CRL does: its issuer and serial number.
type revokedKey struct{ issuer, serial string }

// New checks set and reads its files.
func New(set Settings) (*Store, error) {
	if set.CertFile == "" || set.KeyFile == "" {
		return nil, errors.New("tls: a certificate file and a key file are both needed")
	}
	s := &Store{set: set}
	var err error
	if s.clientAuth, err = parseClientAuth(set.ClientAuth); err != nil {
		return nil, err
	}
	if s.minVersion, err = parseMinVersion(set.MinVersion); err != nil {
		return nil, err
	}
	if s.suites, err = parseCipherSuites(set.CipherSuites); err != nil {
		return nil, err
	}
	if s.clientAuth >= tls.VerifyClientCertIfGiven && set.CAFile == "" {
		return nil, fmt.Errorf("tls: client auth %q needs a CA file to verify client certificates with", set.ClientAuth)
	}
	if set.CRLFile != "" && set.CAFile == "" {
		return nil, fmt.Errorf("tls: crl %q needs a CA file: a revocation list is checked against the CA that signed it", set.CRLFile)
	}
	s.server = &tls.Config{
		MinVersion: s.minVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().server, nil
		},
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the certificate, key, CA and CRL files again. Handshakes that
// start after it returns use the new material; connections already made are
// left as they are. On error the material in use is kept and the error, which
// names the file at fault, returned.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

func (s *Store) load() (*material, error) {
	set := s.set
	cert, err := tls.LoadX509KeyPair(set.CertFile, set.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cert %q, key %q: %w", set.CertFile, set.KeyFile, err)
	}
	now := time.Now()
	switch leaf := cert.Leaf; {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("tls: cert %q expired on %s", set.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("tls: cert %q is not valid before %s", set.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if set.Check != nil {
		if err := set.Check(cert.Leaf); err != nil {
			return nil, fmt.Errorf("tls: cert %q: %w", set.CertFile, err)
		}
	}
	m := &material{cert: cert}
	var cas []*x509.Certificate
	if set.CAFile != "" {
		if cas, err = readCerts(set.CAFile); err != nil {
			return nil, err
		}
		m.cas = x509.NewCertPool()
		for _, c := range cas {
			m.cas.AddCert(c)
		}
	}
	if set.CRLFile != "" {
		if m.revoked, err = readCRLs(set.CRLFile, set.CAFile, cas); err != nil {
			return nil, err
		}
	}
	m.server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   s.clientAuth,
		ClientCAs:    m.cas,
		MinVersion:   s.minVersion,
		CipherSuites: s.suites,
		// Every connection verifies its client afresh, against the CA and the
		// CRL in force: a session resumed from a ticket issued before a reload
		// would not be checked against the new CA file.
		SessionTicketsDisabled: true,
		VerifyConnection:       m.verify,
	}
	return m, nil
}

// readCerts reads the PEM certificates of file.
func readCerts(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: ca: %w", err) // names the file
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls: ca %q: %w", file, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tls: ca %q: no PEM certificate found", file)
	}
	return out, nil
}

// readCRLs reads the revocation lists of file — PEM blocks "X509 CRL", or one DER
// list — checks that a certificate of cas signed each, and returns what they revoke.
func readCRLs(file, caFile string, cas []*x509.Certificate) (map[revokedKey]struct{}, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: crl: %w", err) // names the file
	}
	var ders [][]byte
	if bytes.Contains(b, []byte("-----BEGIN")) {
		for {
			var blk *pem.Block
			blk, b = pem.Decode(b)
			if blk == nil {
				break
			}
			if blk.Type == "X509 CRL" {
				ders = append(ders, blk.Bytes)
			}
		}
		if len(ders) == 0 {
			return nil, fmt.Errorf("tls: crl %q: no PEM block \"X509 CRL\" found", file)
		}
	} else {
		ders = [][]byte{b}
	}
	revoked := make(map[revokedKey]struct{})
	for i, der := range ders {
		rl, err := x509.ParseRevocationList(der)
		if err != nil {
			return nil, fmt.Errorf("tls: crl %q (list %d): %w", file, i+1, err)
		}
		signed := false
		for _, ca := range cas {
			if bytes.Equal(ca.RawSubject, rl.RawIssuer) && rl.CheckSignatureFrom(ca) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("tls: crl %q (list %d, issuer %q): not signed by a certificate of ca %q", file, i+1, rl.Issuer, caFile)
		}
		for _, e := range rl.RevokedCertificateEntries {
			revoked[revokedKey{string(rl.RawIssuer), e.SerialNumber.String()}] = struct{}{}
		}
	}
	return revoked, nil
}

// verify refuses a connection whose verified peer chain holds a revoked
// certificate.
func (m *material) verify(cs tls.ConnectionState) error {
	if len(m.revoked) == 0 {
		return nil
	}
	for _, chain := range cs.VerifiedChains {
		for _, c := range chain {
			if _, ok := m.revoked[revokedKey{string(c.RawIssuer), c.SerialNumber.String()}]; ok {
				return fmt.Errorf("tls: certificate %q (serial %s) is revoked", c.Subject, c.SerialNumber)
			}
		}
	}
	return nil
}

// ServerConfig is the configuration of the server's TLS listeners. It picks the
// material in force at each handshake (GetConfigForClient), so that a Reload
// applies to new connections and never to those already made.
func (s *Store) ServerConfig() *tls.Config { return s.server }

// ClientConfig is a configuration for a connection this process makes to
// serverName (the name its certificate must carry): it presents the store's
// certificate and verifies the server's against the CA file (the system's roots
// without one) and the CRL. Call it for each connection to pick up reloads.
func (s *Store) ClientConfig(serverName string) *tls.Config {
	m := s.cur.Load()
	return &tls.Config{
		ServerName:   serverName,
		RootCAs:      m.cas,
		MinVersion:   s.minVersion,
		CipherSuites: s.suites,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := s.cur.Load().cert
			return &c, nil
		},
		VerifyConnection: m.verify,
	}
}

// PeerConfig is the client configuration of a connection between two peers
// that both hold certificates of the store's CA (mutual TLS, cluster routes): it
// presents the store's certificate and verifies the server's chain against the
// CA file and the CRL in force — for server authentication, at the time of the
// handshake — but checks no host name, since the caller knows only once the
// peer has introduced itself which name its certificate must carry. Without a
// CA file every server certificate is refused. Call it for each connection to
// pick up reloads.
func (s *Store) PeerConfig() *tls.Config {
	m := s.cur.Load()
	return &tls.Config{
		MinVersion:   s.minVersion,
		CipherSuites: s.suites,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := s.cur.Load().cert
			return &c, nil
		},
		// The chain is verified below, like the standard verification but
		// without a host name; nothing else is skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return m.verifyChain(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		},
	}
}

// verifyChain verifies certs (leaf first, then intermediates) against the CA for
// usage, then against the CRL.
func (m *material) verifyChain(certs []*x509.Certificate, usage x509.ExtKeyUsage) error {
	fail := func(err error) error {
		return &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
	}
	if len(certs) == 0 {
		return fail(errors.New("tls: the peer presented no certificate"))
	}
	if m.cas == nil {
		return fail(errors.New("tls: no CA file to verify the peer's certificate with"))
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := certs[0].Verify(x509.VerifyOptions{Roots: m.cas, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fail(err)
	}
	if err := m.verify(tls.ConnectionState{VerifiedChains: chains}); err != nil {
		return fail(err)
	}
	return nil
}

// Certificate is the server certificate in force.
func (s *Store) Certificate() *x509.Certificate { return s.cur.Load().cert.Leaf }

// Settings are the settings the store was made with.
func (s *Store) Settings() Settings { return s.set }
