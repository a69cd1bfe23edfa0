package server

import (
	"errors"
	"math"
	"net/http"
	"strconv"

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

// limitNumber reads a limit: an integer, or a whole number beyond the
// int64 range (written with many digits or an exponent), which saturates.
func limitNumber(v string) (int64, bool) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, true
	}
	if v == "" || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false // not a number ("Inf", "NaN" parse as floats)
	}
	f, err := strconv.ParseFloat(v, 64)
	if (err != nil && !errors.Is(err, strconv.ErrRange)) || f != math.Trunc(f) {
		return 0, false
	}
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64, true
	case f <= math.MinInt64:
		return math.MinInt64, true
	}
	return int64(f), true
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
