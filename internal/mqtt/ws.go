package mqtt

import (
	"context"
	"crypto/x509"
	"github.com/tern-mq/tern/internal/auth"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// WebSocketHandler serves MQTT over WebSocket: a request that offers the "mqtt"
// subprotocol (as MQTT.js and other browser clients do) is upgraded and its binary
// messages carry the MQTT byte stream, packets free to span messages. Any path and
// origin are accepted, as browser clients connect from pages served elsewhere.
func (s *Server) WebSocketHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			Subprotocols:       []string{"mqtt"},
			InsecureSkipVerify: true,
		})
		if err != nil {
			s.log.Debug("websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
			return
		}
		if ws.Subprotocol() != "mqtt" {
			_ = ws.Close(websocket.StatusPolicyViolation, `subprotocol "mqtt" required`)
			return
		}
		// The handler must not return before the connection is over: the
		// WebSocket goes with it.
		nc := &wsConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary), closed: make(chan struct{}),
			secure: r.TLS != nil}
		nc.cert = auth.VerifiedCert(r.TLS)
		s.ServeConn(nc)
		<-nc.closed
	})
}

// wsConn tells when the connection has closed its WebSocket.
type wsConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
	// cert is the client certificate the server verified when the WebSocket
	// came over TLS, nil otherwise: the net.Conn under the WebSocket is out of
	// reach, the HTTP request's TLS state is not.
	cert   *x509.Certificate
	secure bool // the request came over TLS (wss://)
}

// TimeoutBreaksWrites tells the outbound queue not to write with a short
// deadline: a WebSocket whose write deadline passes is closed.
func (w *wsConn) TimeoutBreaksWrites() bool { return true }

func (w *wsConn) Close() error {
	w.once.Do(func() { close(w.closed) })
	return w.Conn.Close()
}
