package route

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tern-mq/tern/internal/wire"
)

// Route authentication (docs/protocol.md, "Route authentication"). With the
// cluster secret, each end of a route sends a fresh random nonce in its RHELLO and,
// once it has the peer's RHELLO, an RAUTH frame with
//
//	HMAC-SHA256(route key, label | direction | len | dialer's RHELLO body | len | acceptor's RHELLO body)
//
// where the route key is derived from the secret (secret.RouteKey), the direction
// says which end the proof is from, and each body is written with its length as a
// uvarint before it. The two RHELLO bodies hold both nonces, both node ids and
// names and everything else each end said, so a proof is good for one connection,
// one direction and one pair of hellos only: it cannot be replayed on another
// connection (the nonces differ), reflected back at its sender (the direction
// differs) or carried between two connections by a node in the middle (the pair of
// hellos differs). Neither the secret nor the key ever travels.

// proofLabel starts every proof: it keeps a route proof apart from any other use of
// the key, and names the construction's version.
const proofLabel = "tern route proof v1"

// Directions of a proof.
const (
	fromDialer   byte = 1 // the proof the node that dialled sends
	fromAcceptor byte = 2 // the proof the node that accepted sends
)

// ErrUnauthenticated refuses a route whose peer did not prove that it has the
// cluster secret, or that asks for a proof this node, without the secret, cannot
// give.
var ErrUnauthenticated = errors.New("route: peer not authenticated")

// newNonce draws the challenge of one connection.
func newNonce() ([]byte, error) {
	n := make([]byte, wire.RouteNonceLen)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("route: nonce: %w", err)
	}
	return n, nil
}

// authPolicy checks that the peer's RHELLO asks for authentication exactly when
// this node does, before any proof is exchanged. haveKey says whether this node
// has the cluster secret.
func authPolicy(haveKey bool, peer *wire.RouteHello) error {
	switch offered := peer.Flags&wire.HelloAuth != 0; {
	case haveKey && !offered:
		return fmt.Errorf("%w: it does not offer to prove the cluster secret (no cluster_secret_file there?)", ErrUnauthenticated)
	case !haveKey && offered:
		return fmt.Errorf("%w: it requires the cluster secret, which this node does not have (set cluster_secret_file)", ErrUnauthenticated)
	}
	return nil
}

// authExchange is one end's part in the proofs of one connection.
type authExchange struct {
	key    []byte
	dialed bool // this end dialled
	// The RHELLO bodies exactly as they went over the wire.
	dialerHello, acceptorHello []byte
}

// newAuthExchange prepares the proofs of a connection: ours and theirs are the
// RHELLO bodies this end sent and received.
func newAuthExchange(key []byte, dialed bool, ours, theirs []byte) *authExchange {
	a := &authExchange{key: key, dialed: dialed}
	if dialed {
		a.dialerHello, a.acceptorHello = ours, theirs
	} else {
		a.dialerHello, a.acceptorHello = theirs, ours
	}
	return a
}

// proof is what this end sends in RAUTH.
func (a *authExchange) proof() []byte {
	dir := fromAcceptor
	if a.dialed {
		dir = fromDialer
	}
	return routeProof(a.key, dir, a.dialerHello, a.acceptorHello)
}

// verify checks the peer's RAUTH proof in constant time.
func (a *authExchange) verify(proof []byte) error {
	dir := fromDialer
	if a.dialed {
		dir = fromAcceptor
	}
	if !hmac.Equal(proof, routeProof(a.key, dir, a.dialerHello, a.acceptorHello)) {
		return fmt.Errorf("%w: its proof of the cluster secret does not verify (its cluster_secret_file holds another secret?)", ErrUnauthenticated)
	}
	return nil
}

func routeProof(key []byte, dir byte, dialerHello, acceptorHello []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(proofLabel))
	mac.Write([]byte{dir})
	var n [binary.MaxVarintLen64]byte
	for _, b := range [][]byte{dialerHello, acceptorHello} {
		mac.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		mac.Write(b)
	}
	return mac.Sum(nil)
}
