package server

import (
	"net/http"

	"github.com/coder/websocket"
)

// handleWS authenticates before the upgrade, so that a bad token gets a
// plain 401, then serves the session.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	tok := bearer(r, true)
	u, err := s.chat.Authenticate(r.Context(), tok)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	opts := &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins}
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" {
			opts.InsecureSkipVerify = true
		}
	}
	conn, err := websocket.Accept(w, r, opts)
	if err != nil {
		// Accept has answered the client (e.g. 403 for a foreign origin).
		s.log.Debug("websocket upgrade", "err", err)
		return
	}
	conn.SetReadLimit(s.cfg.MaxFrameBytes)
	newSession(s, conn, u, tokenID(tok)).run()
}
