package server

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/imserver/imserver/chat"
)

type credentials struct {
	Username    string `json:"username"`
	Password    string `json:"password"`
	DisplayName string `json:"display_name"`
	Invite      string `json:"invite"`
}

type authReply struct {
	User  chat.User `json:"user"`
	Token string    `json:"token"`
}

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	var c credentials
	if err := s.decode(w, r, &c); err != nil {
		s.writeError(w, r, err)
		return
	}
	addr := s.clientAddr(r)
	reg, err := s.guard.registration(addr)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A wrong invite code counts as a failed guess of this address: codes
	// are secrets like passwords.
	var guess attempt
	if c.Invite != "" {
		if guess, err = s.guard.guess(addr); err != nil {
			reg.refund()
			s.writeError(w, r, err)
			return
		}
	}
	u, tok, err := s.chat.RegisterWithInvite(r.Context(), c.Username, c.Password, c.DisplayName, c.Invite)
	if !errors.Is(err, chat.ErrBadInvite) {
		guess.refund()
	}
	if err != nil {
		reg.refund()
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, authReply{User: u, Token: tok})
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var c credentials
	if err := s.decode(w, r, &c); err != nil {
		s.writeError(w, r, err)
		return
	}
	try, err := s.guard.login(c.Username, s.clientAddr(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, tok, err := s.chat.Login(r.Context(), c.Username, c.Password)
	if err != nil {
		// Only a wrong password counts; a busy server or a disabled
		// account's right password does not.
		if chat.ErrorCode(err) != chat.EUnauthorized {
			try.refund()
		}
		s.writeError(w, r, err)
		return
	}
	try.refund()
	writeJSON(w, http.StatusOK, authReply{User: u, Token: tok})
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	if err := s.chat.Logout(r.Context(), tok); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.hub.revokeToken(tokenID(tok))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]chat.User{"user": userOf(r)})
}

func (s *Server) handleUsers(w http.ResponseWriter, r *http.Request) {
	limit, err := queryLimitInt(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	users, err := s.chat.SearchUsers(r.Context(), r.URL.Query().Get("q"), int(limit))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.User{"users": users})
}

// queryLimitInt reads the limit query parameter (0 when absent), a number
// too large for an integer being as large as one: the protocol clamps
// large limits, it does not refuse them.
func queryLimitInt(r *http.Request) (int64, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, ok := limitNumber(v)
	if !ok {
		return 0, chat.Errorf(chat.EBadRequest, "limit must be an integer")
	}
	return n, nil
}

// limitNumber reads a limit written as a JSON integer: digits, optionally
// signed with "-", optionally followed by a non-negative exponent (what
// JavaScript writes for 1e30). Values beyond int64 saturate: the protocol
// clamps large limits, it does not refuse them. Fractions and other
// spellings are not limits.
func limitNumber(v string) (int64, bool) {
	neg := strings.HasPrefix(v, "-")
	mant, exp, hasExp := strings.TrimPrefix(v, "-"), "", false
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		mant, exp, hasExp = mant[:i], strings.TrimPrefix(mant[i+1:], "+"), true
	}
	digits := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return s != ""
	}
	if !digits(mant) || (len(mant) > 1 && mant[0] == '0') || (hasExp && !digits(exp)) {
		return 0, false
	}
	saturated := int64(math.MaxInt64)
	if neg {
		saturated = math.MinInt64
	}
	n, err := strconv.ParseInt(mant, 10, 64)
	if err != nil {
		return saturated, true // digits beyond the range
	}
	if hasExp && n != 0 {
		e, err := strconv.Atoi(exp)
		if err != nil || e > 18 {
			return saturated, true
		}
		for ; e > 0; e-- {
			if n > math.MaxInt64/10 {
				return saturated, true
			}
			n *= 10
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// queryInt reads an integer query parameter, def when absent.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, chat.Errorf(chat.EBadRequest, "%s must be an integer", name)
	}
	return n, nil
}
