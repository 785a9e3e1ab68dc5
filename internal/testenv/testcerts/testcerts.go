// Package testcerts makes, for tests, the certificates TLS needs: a certificate
// authority, server certificates for the loopback addresses, client certificates
// (valid, expired, revoked) and a revocation list, generated with crypto/x509 at test
// time and written as PEM files to a temporary directory. Only tests import it.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that issues certificates and revocation lists.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte // the certificate, PEM-encoded
}

// Leaf is a certificate a CA issued, with its private key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	TLS     tls.Certificate // Cert and its key, for a tls.Config
}

// Pool is a certificate pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n.Add(n, big.NewInt(1))
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// NewCA makes a self-signed certificate authority called name, valid from an hour
// ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Tern tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pemOf("CERTIFICATE", der)}
}

// Options shape a certificate Issue makes.
type Options struct {
	CommonName string
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	Server   bool // for server authentication; else client authentication
	// Peer: for both server and client authentication, as mutual TLS between
	// peers (cluster routes) needs; Server is then ignored.
	Peer bool
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Issue makes a certificate signed by the CA.
func (ca *CA) Issue(t testing.TB, o Options) *Leaf {
	t.Helper()
	key := newKey(t)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	switch {
	case o.Peer:
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case o.Server:
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: []string{"Tern tests"}},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{Cert: cert, CertPEM: pemOf("CERTIFICATE", der), KeyPEM: pemOf("PRIVATE KEY", kder)}
	l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1.
func (ca *CA) Server(t testing.TB) *Leaf {
	t.Helper()
	return ca.Issue(t, Options{CommonName: "localhost", Server: true, DNSNames: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}})
}

// Node issues the certificate of a cluster node called name, for server and
// client authentication: common name and DNS name name, plus localhost, 127.0.0.1
// and ::1.
func (ca *CA) Node(t testing.TB, name string) *Leaf {
	t.Helper()
	return ca.Issue(t, Options{CommonName: name, Peer: true, DNSNames: []string{name, "localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}})
}

// Client issues a client certificate whose common name is cn.
func (ca *CA) Client(t testing.TB, cn string) *Leaf {
	t.Helper()
	return ca.Issue(t, Options{CommonName: cn})
}

// CRLDER is a revocation list signed by the CA that revokes the given
// certificates, DER-encoded.
func (ca *CA) CRLDER(t testing.TB, revoked ...*Leaf) []byte {
	t.Helper()
	tmpl := &x509.RevocationList{
		Number:     serial(t),
		ThisUpdate: time.Now().Add(-time.Minute),
		NextUpdate: time.Now().Add(24 * time.Hour),
	}
	for _, l := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries, x509.RevocationListEntry{
			SerialNumber: l.Cert.SerialNumber, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// CRL is CRLDER PEM-encoded.
func (ca *CA) CRL(t testing.TB, revoked ...*Leaf) []byte {
	t.Helper()
	return pemOf("X509 CRL", ca.CRLDER(t, revoked...))
}

// Pair names the PEM files of a certificate and its key.
type Pair struct{ Cert, Key string }

// Set is a CA and the certificates of a TLS test, each written as PEM files to
// Dir.
type Set struct {
	Dir                      string
	CA                       *CA
	CAFile                   string // the CA's certificate
	CRLFile                  string // revokes Revoked
	Server                   *Leaf
	ServerFiles              Pair
	Client, Expired, Revoked *Leaf
	// ClientFiles, ExpiredFiles and RevokedFiles are the client certificates:
	// valid (common name "alice"), expired ("old") and revoked ("mallory").
	ClientFiles, ExpiredFiles, RevokedFiles Pair
}

// New makes a CA, a server certificate for the loopback addresses and three
// client certificates, and writes them to a temporary directory of t.
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	ca := NewCA(t, "Tern test CA")
	s := &Set{Dir: dir, CA: ca, Server: ca.Server(t), Client: ca.Client(t, "alice"), Revoked: ca.Client(t, "mallory"),
		Expired: ca.Issue(t, Options{CommonName: "old",
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})}
	s.CAFile = WriteFile(t, dir, "ca.pem", ca.PEM)
	s.CRLFile = WriteFile(t, dir, "crl.pem", ca.CRL(t, s.Revoked))
	s.ServerFiles = WriteLeaf(t, dir, "server", s.Server)
	s.ClientFiles = WriteLeaf(t, dir, "client", s.Client)
	s.ExpiredFiles = WriteLeaf(t, dir, "expired", s.Expired)
	s.RevokedFiles = WriteLeaf(t, dir, "revoked", s.Revoked)
	return s
}

// WriteFile writes b to dir/name and returns the path.
func WriteFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteLeaf writes l's certificate and key to dir/name.pem and dir/name-key.pem.
func WriteLeaf(t testing.TB, dir, name string, l *Leaf) Pair {
	t.Helper()
	return Pair{Cert: WriteFile(t, dir, name+".pem", l.CertPEM), Key: WriteFile(t, dir, name+"-key.pem", l.KeyPEM)}
}

// ClientConfig is a TLS client configuration that trusts the CA and, when l is
// not nil, presents l.
func (ca *CA) ClientConfig(l *Leaf) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if l != nil {
		cfg.Certificates = []tls.Certificate{l.TLS}
	}
	return cfg
}
