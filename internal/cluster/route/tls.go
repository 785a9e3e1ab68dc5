package route

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/tern-mq/tern/internal/wire"
)

// Routes over mutual TLS (Config.TLS; docs/security.md, "Routes over TLS"). The
// connection is TLS from its first byte, both ways: the node that accepts asks for
// and verifies the dialler's certificate (tls.RequireAndVerifyClientCert), the node
// that dials verifies the acceptor's, each against the cluster's CA file and CRL,
// for client and server authentication respectively. Once the peer has introduced
// itself (RHELLO), each end checks that the peer's certificate names the node the
// peer says it is, unless Config.TLSAnyName. Only then do the cluster secret's
// proofs (RAUTH), if any, follow, inside TLS.

// ErrTLS refuses a route whose TLS failed: a peer without a valid certificate of
// the cluster's CA, one whose certificate does not name it, one that does not
// speak TLS to a node that does, or the reverse. It counts as an authentication
// failure (Manager.AuthFailures).
var ErrTLS = errors.New("route: tls")

// tlsHint is logged with a TLS refusal: what usually causes one.
const tlsHint = "both ends need cluster_tls, and a certificate issued by the CA of the other's cluster_tls_ca_file " +
	"for both server and client authentication, naming the node (server_name)"

// tlsConn is what a route needs of a TLS connection, client or server side.
type tlsConn interface {
	Handshake() error
	ConnectionState() tls.ConnectionState
}

// tlsRefusal reports whether err is a TLS refusal, by either end: a certificate
// that does not verify, a TLS alert from the peer (which refused ours), a peer
// that does not speak TLS, or one that presented no certificate.
func tlsRefusal(err error) bool {
	var (
		verr   *tls.CertificateVerificationError
		rec    tls.RecordHeaderError
		unk    x509.UnknownAuthorityError
		inv    x509.CertificateInvalidError
		host   x509.HostnameError
		opErr  *net.OpError
		alertE tls.AlertError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &rec), errors.As(err, &unk), errors.As(err, &inv),
		errors.As(err, &host), errors.As(err, &alertE):
		return true
	case errors.As(err, &opErr) && opErr.Op == "remote error": // an alert the peer sent
		return true
	}
	return strings.Contains(err.Error(), "didn't provide a certificate")
}

// looksLikeTLS reports whether b, the first bytes a peer sent, are a TLS record
// (handshake or alert) rather than a route frame: a peer with cluster_tls talking
// to a node without.
func looksLikeTLS(b []byte) bool {
	return len(b) >= 3 && b[0] >= 0x14 && b[0] <= 0x17 && b[1] == 0x03 && b[2] <= 0x04
}

// namesNode reports whether certificate c names node: as a DNS (or IP) subject
// alternative name, or as its common name.
func namesNode(c *x509.Certificate, node string) bool {
	if node == "" {
		return false
	}
	return c.VerifyHostname(node) == nil || slices.Contains(c.DNSNames, node) || c.Subject.CommonName == node
}

// CheckCertificate vets the certificate a node presents on its routes: it must be
// good for both server and client authentication (each end of a route is both), and
// name the node unless anyName. The server runs it on cluster_tls_cert_file at
// start and at every reload.
func CheckCertificate(c *x509.Certificate, node string, anyName bool) error {
	if len(c.ExtKeyUsage) > 0 && !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny) {
		var missing []string
		if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			missing = append(missing, "serverAuth")
		}
		if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			missing = append(missing, "clientAuth")
		}
		if len(missing) > 0 {
			return fmt.Errorf("the certificate lacks extended key usage %s: a node's certificate needs both serverAuth and clientAuth (each end of a route is server and client)",
				strings.Join(missing, " and "))
		}
	}
	if !anyName && !namesNode(c, node) {
		return fmt.Errorf("the certificate (subject %q, DNS names %v) does not name node %q (server_name) as a DNS name or common name: its peers would refuse its routes (or set cluster_tls_verify_names = false)",
			c.Subject.String(), c.DNSNames, node)
	}
	return nil
}

// tlsHandshake runs the TLS handshake of a route connection, when it is one, and
// keeps the peer's certificate.
func (r *Route) tlsHandshake() error {
	tc, ok := r.nc.(tlsConn)
	if !ok {
		return nil
	}
	if err := tc.Handshake(); err != nil {
		var rec tls.RecordHeaderError
		if errors.As(err, &rec) && rec.Conn != nil {
			// A peer without TLS sent its RHELLO in the clear: tell it why,
			// in the clear, as a node without TLS would refuse it.
			_, _ = rec.Conn.Write(wire.AppendErr(nil, wire.CodeAuth, 0,
				"route: this node's routes are TLS (cluster_tls): the peer must have cluster_tls too"))
		}
		if r.dialed { // tlsconf says "tls handshake" of the accepted side's
			err = fmt.Errorf("tls handshake: %w", err)
		}
		return fmt.Errorf("%w: %w", ErrTLS, err)
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 { // both configurations require one; never trust a gap
		return fmt.Errorf("%w: the peer presented no certificate", ErrTLS)
	}
	r.peerCert, r.tlsVersion = cs.PeerCertificates[0], cs.Version
	return nil
}

// checkPeerName checks, once the peer has said who it is, that its certificate
// names it.
func (r *Route) checkPeerName(h *wire.RouteHello) error {
	if r.peerCert == nil || r.m.cfg.TLSAnyName || namesNode(r.peerCert, h.NodeName) {
		return nil
	}
	return fmt.Errorf("%w: the peer's certificate (subject %q, DNS names %v) does not name node %q, which it says it is",
		ErrTLS, r.peerCert.Subject.String(), r.peerCert.DNSNames, h.NodeName)
}
