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
	// Read before the upgrade: a failure is then a plain HTTP error, and the
	// database's deep stack stays on this short-lived goroutine.
	v, err := s.chat.MaxVersion(r.Context(), u.ID)
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
	ww := &wireWriter{ResponseWriter: w}
	conn, err := websocket.Accept(ww, r, opts)
	if err != nil {
		// Accept has answered the client (e.g. 403 for a foreign origin).
		s.log.Debug("websocket upgrade", "err", err)
		return
	}
	conn.SetReadLimit(s.cfg.MaxFrameBytes)
	// The session gets a goroutine of its own and this one returns: the
	// HTTP server then lets go of the request and its buffers, and the
	// session's stack starts small instead of keeping what the handshake
	// grew it to.
	go newSession(s, conn, ww.wire, u, tokenID(tok)).run(v)
}
