package tlsconf

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tern-mq/tern/internal/testenv/testcerts"
)

// serve runs a TLS echo server on loopback: each connection is greeted with
// "hello CN\n" (CN of the verified client certificate, "-" without one), then
// has its lines echoed.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := NewListener(l, cfg, 2*time.Second)
	t.Cleanup(func() { _ = tl.Close() })
	go func() {
		for {
			nc, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				cert, err := PeerCertificate(nc, 2*time.Second)
				if err != nil {
					return
				}
				cn := "-"
				if cert != nil {
					cn = cert.Subject.CommonName
				}
				if _, err := io.WriteString(nc, "hello "+cn+"\n"); err != nil {
					return
				}
				_, _ = io.Copy(nc, nc)
			}()
		}
	}()
	return l.Addr().String()
}

// greet dials addr with cfg and returns the server's greeting.
func greet(addr string, cfg *tls.Config) (string, *tls.Conn, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return "", nil, err
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return "", nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return strings.TrimSpace(line), c, nil
}

func newStore(t *testing.T, set Settings) *Store {
	t.Helper()
	s, err := New(set)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func baseSettings(cs *testcerts.Set) Settings {
	return Settings{CertFile: cs.ServerFiles.Cert, KeyFile: cs.ServerFiles.Key}
}

func TestServerWithoutClientAuth(t *testing.T) {
	cs := testcerts.New(t)
	addr := serve(t, newStore(t, baseSettings(cs)).ServerConfig())
	for _, name := range []string{"127.0.0.1", "localhost"} {
		cfg := cs.CA.ClientConfig(nil)
		cfg.ServerName = name
		got, c, err := greet(addr, cfg)
		if err != nil || got != "hello -" {
			t.Fatalf("server name %s: %q, %v", name, got, err)
		}
		c.Close()
	}
	// A client that does not trust the CA refuses the server.
	other := testcerts.NewCA(t, "other")
	if _, _, err := greet(addr, other.ClientConfig(nil)); err == nil {
		t.Fatal("a client trusting another CA accepted the server")
	}
}

func TestClientAuthRequire(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.CAFile, set.CRLFile, set.ClientAuth = cs.CAFile, cs.CRLFile, "require"
	addr := serve(t, newStore(t, set).ServerConfig())

	got, c, err := greet(addr, cs.CA.ClientConfig(cs.Client))
	if err != nil || got != "hello alice" {
		t.Fatalf("valid client certificate: %q, %v", got, err)
	}
	c.Close()
	for name, leaf := range map[string]*testcerts.Leaf{"no": nil, "expired": cs.Expired, "revoked": cs.Revoked,
		"another CA's": testcerts.NewCA(t, "other").Client(t, "eve")} {
		if got, _, err := greet(addr, cs.CA.ClientConfig(leaf)); err == nil {
			t.Errorf("%s client certificate accepted: %q", name, got)
		}
	}
}

func TestClientAuthVerifyAndRequest(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.CAFile, set.ClientAuth = cs.CAFile, "verify"
	addr := serve(t, newStore(t, set).ServerConfig())
	for leaf, want := range map[*testcerts.Leaf]string{nil: "hello -", cs.Client: "hello alice"} {
		got, c, err := greet(addr, cs.CA.ClientConfig(leaf))
		if err != nil || got != want {
			t.Fatalf("verify: %q, %v; want %q", got, err, want)
		}
		c.Close()
	}
	if _, _, err := greet(addr, cs.CA.ClientConfig(cs.Expired)); err == nil {
		t.Fatal("verify: an expired certificate was accepted")
	}

	// request: asked for, never verified, so PeerCertificate gives none.
	set.ClientAuth = "request"
	addr = serve(t, newStore(t, set).ServerConfig())
	got, c, err := greet(addr, cs.CA.ClientConfig(cs.Expired))
	if err != nil || got != "hello -" {
		t.Fatalf("request: %q, %v", got, err)
	}
	c.Close()
}

func TestCRLInDER(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.CAFile, set.ClientAuth = cs.CAFile, "require"
	set.CRLFile = testcerts.WriteFile(t, cs.Dir, "crl.der", cs.CA.CRLDER(t, cs.Client))
	addr := serve(t, newStore(t, set).ServerConfig())
	if _, _, err := greet(addr, cs.CA.ClientConfig(cs.Client)); err == nil {
		t.Fatal("a certificate the DER CRL revokes was accepted")
	}
	got, c, err := greet(addr, cs.CA.ClientConfig(cs.Revoked))
	if err != nil || got != "hello mallory" {
		t.Fatalf("a certificate that CRL does not revoke: %q, %v", got, err)
	}
	c.Close()
}

func TestMinVersionAndCiphers(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.MinVersion = "1.3"
	addr := serve(t, newStore(t, set).ServerConfig())
	cfg := cs.CA.ClientConfig(nil)
	cfg.MaxVersion = tls.VersionTLS12
	if _, _, err := greet(addr, cfg); err == nil {
		t.Fatal("TLS 1.2 accepted with min version 1.3")
	}
	got, c, err := greet(addr, cs.CA.ClientConfig(nil))
	if err != nil || c.ConnectionState().Version != tls.VersionTLS13 {
		t.Fatalf("TLS 1.3: %q, %v", got, err)
	}
	c.Close()

	set = baseSettings(cs)
	set.CipherSuites = []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
	addr = serve(t, newStore(t, set).ServerConfig())
	cfg = cs.CA.ClientConfig(nil)
	cfg.MaxVersion = tls.VersionTLS12
	cfg.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	if _, _, err := greet(addr, cfg); err == nil {
		t.Fatal("a cipher suite left out of the list was accepted")
	}
	cfg.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
	if _, c, err := greet(addr, cfg); err != nil {
		t.Fatalf("the listed cipher suite: %v", err)
	} else {
		c.Close()
	}
}

func TestSettingsErrors(t *testing.T) {
	cs := testcerts.New(t)
	other := testcerts.NewCA(t, "other")
	garbage := testcerts.WriteFile(t, cs.Dir, "garbage.pem", []byte("not a PEM file\n"))
	otherCRL := testcerts.WriteFile(t, cs.Dir, "other-crl.pem", other.CRL(t))
	for _, tc := range []struct {
		name string
		mod  func(*Settings)
		want string // in the error
	}{
		{"no key", func(s *Settings) { s.KeyFile = "" }, "key file"},
		{"missing cert", func(s *Settings) { s.CertFile = cs.Dir + "/nope.pem" }, "nope.pem"},
		{"key of another cert", func(s *Settings) { s.KeyFile = cs.ClientFiles.Key }, cs.ServerFiles.Cert},
		{"expired cert", func(s *Settings) { s.CertFile, s.KeyFile = cs.ExpiredFiles.Cert, cs.ExpiredFiles.Key }, "expired"},
		{"garbage CA", func(s *Settings) { s.CAFile = garbage }, garbage},
		{"missing CA", func(s *Settings) { s.CAFile = cs.Dir + "/noca.pem" }, "noca.pem"},
		{"garbage CRL", func(s *Settings) { s.CAFile, s.CRLFile = cs.CAFile, garbage }, garbage},
		{"CRL of another CA", func(s *Settings) { s.CAFile, s.CRLFile = cs.CAFile, otherCRL }, "other-crl.pem"},
		{"CRL without CA", func(s *Settings) { s.CRLFile = cs.CRLFile }, "needs a CA file"},
		{"require without CA", func(s *Settings) { s.ClientAuth = "require" }, "needs a CA file"},
		{"bad client auth", func(s *Settings) { s.ClientAuth = "maybe" }, "maybe"},
		{"bad version", func(s *Settings) { s.MinVersion = "1.1" }, "1.1"},
		{"insecure cipher", func(s *Settings) { s.CipherSuites = []string{"TLS_RSA_WITH_RC4_128_SHA"} }, "insecure"},
		{"unknown cipher", func(s *Settings) { s.CipherSuites = []string{"TLS_NOPE"} }, "TLS_NOPE"},
		{"TLS 1.3 cipher", func(s *Settings) { s.CipherSuites = []string{"TLS_AES_128_GCM_SHA256"} }, "TLS 1.3"},
	} {
		set := baseSettings(cs)
		tc.mod(&set)
		_, err := New(set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestReload(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.CAFile, set.ClientAuth = cs.CAFile, "verify"
	st := newStore(t, set)
	addr := serve(t, st.ServerConfig())
	_, old, err := greet(addr, cs.CA.ClientConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	first := old.ConnectionState().PeerCertificates[0].SerialNumber

	// A file that does not parse: the error names it, the old certificate stays.
	if err := os.WriteFile(cs.ServerFiles.Cert, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Reload(); err == nil || !strings.Contains(err.Error(), cs.ServerFiles.Cert) {
		t.Fatalf("reload of a broken cert: %v", err)
	}
	if st.Certificate().SerialNumber.Cmp(first) != 0 {
		t.Fatal("a failed reload replaced the certificate")
	}

	next := cs.CA.Server(t)
	testcerts.WriteLeaf(t, cs.Dir, "server", next)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	_, c, err := greet(addr, cs.CA.ClientConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
		t.Fatalf("after reload a new connection got serial %v, want %v", got, next.Cert.SerialNumber)
	}
	// The connection made before the reload still works.
	_ = old.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(old, "still here\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("still here\n"))
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != "still here\n" {
		t.Fatalf("old connection after reload: %q, %v", buf, err)
	}
}

func TestClientConfig(t *testing.T) {
	cs := testcerts.New(t)
	set := baseSettings(cs)
	set.CAFile, set.ClientAuth = cs.CAFile, "require"
	addr := serve(t, newStore(t, set).ServerConfig())
	// A store of the client's own files, as a cluster node dialling another has.
	client := newStore(t, Settings{CertFile: cs.ClientFiles.Cert, KeyFile: cs.ClientFiles.Key, CAFile: cs.CAFile})
	got, c, err := greet(addr, client.ClientConfig("localhost"))
	if err != nil || got != "hello alice" {
		t.Fatalf("ClientConfig: %q, %v", got, err)
	}
	c.Close()
	if _, _, err := greet(addr, client.ClientConfig("elsewhere.example")); err == nil {
		t.Fatal("a server certificate for another name was accepted")
	}
}

func TestStalledHandshakeIsBounded(t *testing.T) {
	cs := testcerts.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tl := NewListener(l, newStore(t, baseSettings(cs)).ServerConfig(), 200*time.Millisecond)
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close() // says nothing: the handshake stalls
	nc, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := nc.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || time.Since(start) > 2*time.Second {
			t.Fatalf("Read: %v after %v", err, time.Since(start))
		}
		// Every later call gives the same outcome at once.
		if _, err2 := nc.Write([]byte("x")); !errors.Is(err2, errors.Unwrap(err)) && err2 == nil {
			t.Fatalf("Write after a failed handshake: %v", err2)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stalled handshake was not bounded")
	}
}

func TestPeerCertificateOfPlainConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if c, err := PeerCertificate(a, time.Second); c != nil || err != nil {
		t.Fatalf("plain connection: %v, %v", c, err)
	}
}

// FuzzPolicy: the TLS policy strings come from the operator's configuration
// (tls_client_auth, tls_min_version and tls_ciphers, split at commas as the
// server splits it). Each parses to a value the policy allows, which its name
// gives again, or is refused with an error that says which setting is wrong.
func FuzzPolicy(f *testing.F) {
	f.Add("none", "1.2", "")
	f.Add("REQUIRE", "1.3", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")
	f.Add("verify", "", strings.Join(CipherSuiteNames(), ","))
	f.Add("request", "1.1", "TLS_RSA_WITH_RC4_128_SHA")
	f.Add("sometimes", "tls1.3", "TLS_AES_128_GCM_SHA256")
	f.Add("", "1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,nope")
	f.Fuzz(func(t *testing.T, clientAuth, minVersion, ciphers string) {
		if ca, err := parseClientAuth(clientAuth); err != nil {
			if !strings.HasPrefix(err.Error(), "tls: client auth ") {
				t.Fatalf("client auth %q: %v", clientAuth, err)
			}
		} else if i := slices.Index(ClientAuthModes, strings.ToLower(clientAuth)); i < 0 && clientAuth != "" {
			t.Fatalf("client auth %q accepted as %v", clientAuth, ca)
		} else if again, _ := parseClientAuth(ClientAuthModes[max(i, 0)]); again != ca {
			t.Fatalf("client auth %q is %v, its name %q %v", clientAuth, ca, ClientAuthModes[max(i, 0)], again)
		}
		if v, err := parseMinVersion(minVersion); err != nil {
			if !strings.HasPrefix(err.Error(), "tls: min version ") {
				t.Fatalf("min version %q: %v", minVersion, err)
			}
		} else if v != tls.VersionTLS12 && v != tls.VersionTLS13 {
			t.Fatalf("min version %q accepted as %#x", minVersion, v)
		}
		ids, err := parseCipherSuites(strings.Split(ciphers, ","))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tls: cipher suite ") || ids != nil {
				t.Fatalf("cipher suites %q: %v, %v", ciphers, ids, err)
			}
			return
		}
		var names []string
		for j, id := range ids {
			// tls.CipherSuites lists only the suites Go deems secure.
			i := slices.IndexFunc(tls.CipherSuites(), func(cs *tls.CipherSuite) bool { return cs.ID == id })
			if i < 0 || !slices.Contains(tls.CipherSuites()[i].SupportedVersions, tls.VersionTLS12) || slices.Contains(ids[:j], id) {
				t.Fatalf("cipher suites %q accepted as %#x", ciphers, ids)
			}
			names = append(names, tls.CipherSuiteName(id))
		}
		if again, err := parseCipherSuites(names); err != nil || !slices.Equal(again, ids) {
			t.Fatalf("cipher suites %q are %#x; their names %q give %#x, %v", ciphers, ids, names, again, err)
		}
	})
}
