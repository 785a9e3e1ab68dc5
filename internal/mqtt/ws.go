package mqtt

import (
	"context"
	"net/http"

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
		done := s.serveConn(websocket.NetConn(context.Background(), ws, websocket.MessageBinary), true)
		if done != nil {
			<-done
		}
	})
}
