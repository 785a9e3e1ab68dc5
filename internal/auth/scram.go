package auth

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
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
	mech     string
	user     *User
	login    *Login
	failed   bool

	// For the final message's check by hand (lenientFinal): the hash, the
	// credentials the exchange runs on, the client's first message and the
	// server's answer.
	hf                 scram.HashGeneratorFcn
	creds              scram.StoredCredentials
	first, serverFirst string
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
	l := &SCRAMLogin{a: a, protocol: protocol, remote: remote, hf: hf, mech: mechanism}
	lookup := func(name string) (scram.StoredCredentials, error) {
		if e := t.byName[name]; e != nil {
			if c, ok := e.scram[mechanism]; ok {
				l.creds = c
				return c, nil
			}
		}
		// Answer as for a real user; the client's proof then cannot match.
		l.creds = scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(a.fakeSalt(name)), Iters: fakeIterations},
			StoredKey:  a.fakeSalt("stored\x00" + name), ServerKey: a.fakeSalt("server\x00" + name),
		}
		return l.creds, nil
	}
	srv, err := hf.NewServer(lookup)
	if err != nil {
		return nil, fmt.Errorf("scram: %w", err)
	}
	if d := a.throttle.delay(hostOf(remote)); d > 0 {
		time.Sleep(d)
	}
	l.conv = srv.NewConversation()
	return l, nil
}

// Step takes the client's next message and returns the server's answer. When
// the exchange fails it returns an error wrapping ErrDenied, after the pause
// the source address has earned; the caller sends the protocol's
// authentication error and closes the connection.
func (l *SCRAMLogin) Step(msg []byte) ([]byte, error) {
	if l.failed || l.user != nil {
		return nil, ErrDenied
	}
	var out string
	var err error
	valid := false
	if l.serverFirst != "" && !l.conv.Done() {
		if o, handled, ok := l.lenientFinal(string(msg)); handled {
			out, valid = o, ok
			if !ok {
				err = errors.New("challenge proof invalid")
			}
		}
	}
	if out == "" && err == nil {
		out, err = l.conv.Step(string(msg))
		valid = l.conv.Done() && l.conv.Valid()
		if err == nil && l.serverFirst == "" {
			l.first, l.serverFirst = string(msg), out
		}
	}
	if err != nil || (l.conv.Done() && !valid) {
		l.failed = true
		reason := fmt.Errorf("%w: scram: wrong user name or password", ErrDenied)
		if err != nil && !errors.Is(err, ErrDenied) {
			reason = fmt.Errorf("%w: scram: %w", ErrDenied, err)
		}
		return nil, l.a.fail(l.protocol, l.remote, l.conv.Username(), reason)
	}
	if valid {
		// The users file in force now: it may have been reloaded during the
		// exchange, which ran on the credentials of the one before.
		t := l.a.table.Load()
		name := l.conv.Username()
		var u *User
		if e := t.byName[name]; e != nil {
			if c, ok := e.scram[l.mech]; ok && bytes.Equal(c.StoredKey, l.creds.StoredKey) {
				u = e.user
			}
		}
		if u != nil && !servesAccounts(l.protocol, u) {
			l.failed = true
			return nil, l.a.fail(l.protocol, l.remote, u.Name, fmt.Errorf("%w: user of account %q: %s clients cannot use accounts yet", ErrDenied, u.Account.Name, l.protocol))
		}
		if u == nil {
			l.failed = true
			return nil, l.a.fail(l.protocol, l.remote, name, fmt.Errorf("%w: user removed or credentials changed during login", ErrDenied))
		}
		l.user = u
		l.login = &Login{user: u, table: t, protocol: l.protocol, remote: l.remote, how: proofSCRAM, name: u.Name,
			scramMech: l.mech, scramKey: l.creds.StoredKey}
		l.a.count(l.protocol, true)
		l.a.throttle.succeeded(hostOf(l.remote))
	}
	return []byte(out), nil
}

// Done reports whether the exchange finished successfully.
func (l *SCRAMLogin) Done() bool { return l.user != nil }

// User is the authenticated user once Done.
func (l *SCRAMLogin) User() *User { return l.user }

// Login is the exchange's Login once Done, for Recheck.
func (l *SCRAMLogin) Login() *Login { return l.login }

// lenientFinal checks a client's final message whose nonce is longer than the
// server's and ends with it, as Kafka's brokers accept (librdkafka 2.0 sends its
// own nonce again before the server's): the proof is verified over the message
// as sent, whose AuthMessage still holds the server's fresh nonce. handled is
// false for any other message, left to the SCRAM library.
func (l *SCRAMLogin) lenientFinal(msg string) (out string, handled, ok bool) {
	fields := strings.Split(msg, ",")
	sn, _, _ := strings.Cut(strings.TrimPrefix(l.serverFirst, "r="), ",")
	if len(fields) < 3 || !strings.HasPrefix(fields[1], "r=") {
		return "", false, false
	}
	nonce := fields[1][2:]
	if nonce == sn || !strings.HasSuffix(nonce, sn) {
		return "", false, false
	}
	// The client's gs2 header ("n,," or "y,,", with an authzid): what c= must
	// carry. Channel binding ("p=") is not offered.
	gs2End := strings.Index(l.first, ",")
	if gs2End < 0 {
		return "", true, false
	}
	if j := strings.Index(l.first[gs2End+1:], ","); j >= 0 {
		gs2End += j + 1
	} else {
		return "", true, false
	}
	gs2, firstBare := l.first[:gs2End+1], l.first[gs2End+1:]
	cbind, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(fields[0], "c="))
	if !strings.HasPrefix(fields[0], "c=") || err != nil || string(cbind) != gs2 || strings.HasPrefix(gs2, "p") {
		return "", true, false
	}
	last := fields[len(fields)-1]
	proof, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(last, "p="))
	if !strings.HasPrefix(last, "p=") || err != nil {
		return "", true, false
	}
	authMsg := []byte(firstBare + "," + l.serverFirst + "," + msg[:strings.LastIndex(msg, ",")])
	mac := func(key []byte) []byte {
		m := hmac.New(l.hf, key)
		m.Write(authMsg)
		return m.Sum(nil)
	}
	clientSig := mac(l.creds.StoredKey)
	if len(proof) != len(clientSig) {
		return "", true, false
	}
	for i := range proof {
		proof[i] ^= clientSig[i]
	}
	h := l.hf()
	h.Write(proof)
	if !hmac.Equal(h.Sum(nil), l.creds.StoredKey) {
		return "", true, false
	}
	return "v=" + base64.StdEncoding.EncodeToString(mac(l.creds.ServerKey)), true, true
}
