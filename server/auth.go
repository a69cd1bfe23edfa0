package server

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/imserver/imserver/chat"
)

type ctxKey int

const (
	userKey ctxKey = iota
	tokenKey
)

// bearer returns the request's token: the Authorization header, or for the
// WebSocket the token query parameter, since browsers cannot set headers
// there. An Authorization header of another scheme holds no token: a
// browser behind a proxy's Basic authentication sends one with the
// handshake by itself, and the socket still takes ?token= then.
func bearer(r *http.Request, allowQuery bool) string {
	if h := r.Header.Get("Authorization"); h != "" {
		// The scheme is case-insensitive (RFC 9110 11.1): "bearer" is
		// as good as "Bearer".
		if scheme, t, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(t)
		}
	}
	if allowQuery {
		return r.URL.Query().Get("token")
	}
	return ""
}

// authed wraps h so that it runs only with a valid token.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r, false)
		u, _, err := s.chat.Authorize(r.Context(), tok)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), userKey, u)
		ctx = context.WithValue(ctx, tokenKey, tok)
		h(w, r.WithContext(ctx))
	}
}

func userOf(r *http.Request) chat.User {
	u, _ := r.Context().Value(userKey).(chat.User)
	return u
}

func tokenOf(r *http.Request) string {
	t, _ := r.Context().Value(tokenKey).(string)
	return t
}

// tokenID identifies a token's sessions in memory without keeping it.
func tokenID(token string) string { return hex.EncodeToString(chat.TokenHash(token)) }

// metricsGate serves h to a scraper holding the configured metrics token
// or to an admin. The contract leaves only /healthz, the OpenAPI document
// and the UI open, and a server on the internet should not show anyone
// its load; a user who is no admin gets 403.
func (s *Server) metricsGate(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r, false)
		want := s.cfg.MetricsToken
		if want != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		// The operator chose the metrics token and it may be short: a
		// wrong one counts as a failed guess of this address, as a wrong
		// invite code does (a user's token, refunded, does not).
		var guess attempt
		if want != "" && tok != "" {
			var err error
			if guess, err = s.guard.guess(s.clientAddr(r)); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		u, _, err := s.chat.Authorize(r.Context(), tok)
		if err == nil {
			guess.refund()
		}
		if err == nil && !s.chat.IsAdmin(u) {
			err = chat.Errorf(chat.EForbidden, "metrics are for admins and the metrics token")
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	}
}
