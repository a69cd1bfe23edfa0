package server

import (
	"context"
	"time"

	"github.com/coder/websocket"
)

// An open socket is a use of its session: an app left open is in use,
// however quiet, so its session does not expire for idleness while the
// socket lasts (PROTOCOL.md v1.2: a token unused for auth.token_idle
// expires). A session past auth.token_max_age does expire, socket or not:
// its sockets close with 1008, as at logout, and the client logs in again.
// One loop renews every open socket's session, at chat.KeepAliveEvery.

func (s *Server) keepAliveLoop() {
	defer close(s.keepDone)
	t := time.NewTicker(s.chat.KeepAliveEvery())
	defer t.Stop()
	for {
		select {
		case <-s.keepStop:
			return
		case now := <-t.C:
			// Sockets of one token (tabs of one login) share its answer.
			alive := make(map[string]bool)
			for _, ss := range s.hub.sessions() {
				ok, seen := alive[ss.tokenHash]
				if !seen {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					ok = s.chat.KeepAlive(ctx, ss.token, ss.created, now)
					cancel()
					alive[ss.tokenHash] = ok
				}
				if !ok {
					ss.close(websocket.StatusPolicyViolation, "session ended; log in again")
				}
			}
		}
	}
}
