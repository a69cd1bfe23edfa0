package server

import (
	"context"
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
// there.
func bearer(r *http.Request, allowQuery bool) string {
	if h := r.Header.Get("Authorization"); h != "" {
		// The scheme is case-insensitive (RFC 9110 11.1): "bearer" is
		// as good as "Bearer".
		if scheme, t, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(t)
		}
		return ""
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
