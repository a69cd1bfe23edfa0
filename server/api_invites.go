package server

import (
	"net/http"
	"strings"

	"github.com/imserver/imserver/chat"
)

func (s *Server) handleCreateInvite(w http.ResponseWriter, r *http.Request) {
	var req chat.InviteRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	inv, err := s.chat.CreateInvite(r.Context(), userOf(r), req, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	inv.URL = InviteURL(s.baseURL(r), inv.Code)
	writeJSON(w, http.StatusCreated, map[string]chat.Invite{"invite": inv})
}

func (s *Server) handleInvites(w http.ResponseWriter, r *http.Request) {
	list, err := s.chat.Invites(r.Context(), userOf(r), false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.Invite{"invites": list})
}

func (s *Server) handleRevokeInvite(w http.ResponseWriter, r *http.Request) {
	if err := s.chat.RevokeInvite(r.Context(), userOf(r), r.PathValue("code")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// InviteURL is the join page of an invite code.
func InviteURL(base, code string) string {
	return strings.TrimRight(base, "/") + "/join/" + code
}

// baseURL is the server's address as the client reached it: PublicURL
// when configured, else the request's host (through a trusted proxy, its
// X-Forwarded-Proto decides the scheme).
func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	} else if isTrusted(peerAddr(r.RemoteAddr), s.cfg.TrustedProxies) && r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
