package monitor

import (
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/tern-mq/tern/internal/auth"
)

// RequireAuth puts every endpoint but /healthz behind a: a request carries
// HTTP Basic credentials, a bearer token ("Authorization: Bearer ...") or, over
// TLS, a client certificate, unless the anonymous policy admits it; its user
// must have the monitor right. Call it before Start or Serve.
func (s *Server) RequireAuth(a *auth.Authenticator) {
	s.auth = a
}

// guard wraps the endpoints with the authentication RequireAuth asked for.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.auth == nil || r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		req := auth.Request{Protocol: "http", Remote: remoteAddr(r)}
		req.Cert = auth.VerifiedCert(r.TLS)
		if user, pw, ok := r.BasicAuth(); ok {
			req.Username, req.Password = user, []byte(pw)
		} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			req.Token = []byte(strings.TrimSpace(tok))
		}
		u, err := s.auth.Authenticate(req)
		switch {
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Basic realm="tern", charset="UTF-8"`)
			msg := "authentication required"
			if !errors.Is(err, auth.ErrAnonymous) {
				msg = "authentication failed"
			}
			http.Error(w, msg, http.StatusUnauthorized)
		case !u.Monitor:
			http.Error(w, "user may not read the monitoring endpoints", http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func remoteAddr(r *http.Request) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		return a
	}
	return nil
}
