package server

import (
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
	ww := &wireWriter{ResponseWriter: w}
	if t := r.URL.Query().Get("ticket"); t != "" {
		// A ticket given is the credential, even beside an Authorization
		// header: a used, expired or unknown one is 401, never an upgrade
		// on the header's strength. The ticket is only looked at here and
		// spent at the upgrade itself: a socket refused (too many, a
		// foreign Origin, no handshake) leaves it to the client's next
		// try. Of two tries racing with one ticket, one upgrades and the
		// other gets 401.
		u, sess, err = s.chat.CheckTicket(r.Context(), t)
		ww.beforeUpgrade = func() error {
			_, _, err := s.chat.UseTicket(r.Context(), t)
			return err
		}
	} else {
		u, sess, err = s.chat.Authorize(r.Context(), bearer(r, true))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ok, counted := s.sockets.admit(r.Context(), u.ID, s.cfg.MaxSessionsPerUser)
	if !ok {
		s.metrics.SessionsRefused.Inc()
		s.writeError(w, r, &chat.Error{Code: chat.ERateLimited, RetryAfterMS: int64(5 * time.Second / time.Millisecond),
			Message: "too many open sockets for this user (websocket.max_sessions_per_user)"})
		return
	}
	admitted := true
	defer func() {
		if admitted {
			s.sockets.release(u.ID, counted)
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
	conn, err := websocket.Accept(ww, r, opts)
	if err != nil {
		s.log.Debug("websocket upgrade", "err", err)
		if ww.refused != 0 || ww.vetoed != nil {
			// Accept's plain-text answer (403 for a foreign origin, 426
			// for a request without the handshake, 500 when the ticket
			// could not be spent) was held back: the client gets the
			// protocol's JSON error instead.
			for _, h := range []string{"Connection", "Upgrade", "Sec-WebSocket-Accept", "Sec-WebSocket-Protocol", "Sec-WebSocket-Extensions"} {
				w.Header().Del(h)
			}
			err := ww.refusedError()
			if ww.vetoed != nil {
				err = ww.vetoed
			}
			s.writeError(w, r, err)
		}
		return
	}
	conn.SetReadLimit(s.cfg.MaxFrameBytes)
	// The session gets a goroutine of its own and this one returns: the
	// HTTP server then lets go of the request and its buffers, and the
	// session's stack starts small instead of keeping what the handshake
	// grew it to. It gives the admission back when it ends.
	admitted = false
	ss := newSession(s, conn, ww.wire, u, sess)
	go func() {
		defer s.sockets.release(u.ID, counted)
		ss.run(v)
	}()
}
