package server

import (
	"encoding/hex"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/imserver/imserver/chat"
)

const wsPath = "/api/v1/ws"

// handleWS authenticates before the upgrade, so that a bad token or ticket
// gets a plain 401, then serves the session. A one-time ticket
// (?ticket=) keeps long-lived tokens out of URLs, which proxies log;
// ?token= still works for clients that have nothing else.
func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	var u chat.User
	var sess chat.Session
	var err error
	if t := r.URL.Query().Get("ticket"); t != "" && r.Header.Get("Authorization") == "" {
		u, sess, err = s.chat.UseTicket(r.Context(), t)
	} else {
		u, sess, err = s.chat.Authorize(r.Context(), bearer(r, true))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !s.hub.admit(u.ID, s.cfg.MaxSessionsPerUser) {
		s.metrics.SessionsRefused.Inc()
		s.writeError(w, r, &chat.Error{Code: chat.ERateLimited, RetryAfterMS: int64(5 * time.Second / time.Millisecond),
			Message: "too many open sockets for this user (websocket.max_sessions_per_user)"})
		return
	}
	admitted := true
	defer func() {
		if admitted {
			s.hub.release(u.ID)
		}
	}()
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
		s.log.Debug("websocket upgrade", "err", err)
		if ww.refused != 0 {
			// Accept's plain-text answer (403 for a foreign origin, 426
			// for a request without the handshake) was held back: the
			// client gets the protocol's JSON error instead.
			w.Header().Del("Connection")
			w.Header().Del("Upgrade")
			s.writeError(w, r, ww.refusedError())
		}
		return
	}
	conn.SetReadLimit(s.cfg.MaxFrameBytes)
	// The session gets a goroutine of its own and this one returns: the
	// HTTP server then lets go of the request and its buffers, and the
	// session's stack starts small instead of keeping what the handshake
	// grew it to. It gives the admission back when it ends.
	admitted = false
	ss := newSession(s, conn, ww.wire, u, hex.EncodeToString(sess.TokenHash))
	go func() {
		defer s.hub.release(u.ID)
		ss.run(v)
	}()
}
