package auth

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xdg-go/scram"
)

// fakeIterations is the iteration count offered for users that do not exist,
// the same as `tern passwd` uses, so the first server message does not tell.
const fakeIterations = 4096

// SCRAMLogin is one SCRAM exchange (RFC 5802) with a client: feed each client
// message to Step and send back its answer until Done.
type SCRAMLogin struct {
	a        *Authenticator
	protocol string
	remote   net.Addr
	conv     *scram.ServerConversation
	user     *User
	failed   bool
}

// SCRAMMechanisms are the SCRAM mechanisms the Authenticator speaks.
var SCRAMMechanisms = []string{SCRAMSHA256, SCRAMSHA512}

// NewSCRAMLogin starts a SCRAM exchange with mechanism SCRAMSHA256 or
// SCRAMSHA512 for a client of protocol at remote.
func (a *Authenticator) NewSCRAMLogin(mechanism, protocol string, remote net.Addr) (*SCRAMLogin, error) {
	hf := scram.SHA256
	switch mechanism {
	case SCRAMSHA256:
	case SCRAMSHA512:
		hf = scram.SHA512
	default:
		return nil, fmt.Errorf("mechanism %q not supported", mechanism)
	}
	t := a.table.Load()
	lookup := func(name string) (scram.StoredCredentials, error) {
		if e := t.byName[name]; e != nil {
			if c, ok := e.scram[mechanism]; ok {
				return c, nil
			}
		}
		// Answer as for a real user; the client's proof then cannot match.
		return scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(a.fakeSalt(name)), Iters: fakeIterations},
			StoredKey:  a.fakeSalt("stored\x00" + name), ServerKey: a.fakeSalt("server\x00" + name),
		}, nil
	}
	srv, err := hf.NewServer(lookup)
	if err != nil {
		return nil, fmt.Errorf("scram: %w", err)
	}
	if d := a.throttle.delay(hostOf(remote)); d > 0 {
		time.Sleep(d)
	}
	return &SCRAMLogin{a: a, protocol: protocol, remote: remote, conv: srv.NewConversation()}, nil
}

// Step takes the client's next message and returns the server's answer. When
// the exchange fails it returns an error wrapping ErrDenied, after the pause
// the source address has earned; the caller sends the protocol's
// authentication error and closes the connection.
func (l *SCRAMLogin) Step(msg []byte) ([]byte, error) {
	if l.failed {
		return nil, ErrDenied
	}
	out, err := l.conv.Step(string(msg))
	if err != nil || (l.conv.Done() && !l.conv.Valid()) {
		l.failed = true
		reason := fmt.Errorf("%w: scram: wrong user name or password", ErrDenied)
		if err != nil && !errors.Is(err, ErrDenied) {
			reason = fmt.Errorf("%w: scram: %w", ErrDenied, err)
		}
		return nil, l.a.fail(l.protocol, l.remote, l.conv.Username(), reason)
	}
	if l.conv.Done() {
		u := l.a.userByName(l.conv.Username())
		if u == nil {
			l.failed = true
			return nil, l.a.fail(l.protocol, l.remote, l.conv.Username(), fmt.Errorf("%w: user removed during login", ErrDenied))
		}
		l.user = u
		l.a.count(l.protocol, true)
		l.a.throttle.succeeded(hostOf(l.remote))
	}
	return []byte(out), nil
}

// Done reports whether the exchange finished successfully.
func (l *SCRAMLogin) Done() bool { return l.user != nil }

// User is the authenticated user once Done.
func (l *SCRAMLogin) User() *User { return l.user }
