package server

import (
	"encoding/hex"
	"net/http"

	"github.com/imserver/imserver/chat"
)

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	list, err := s.chat.Sessions(r.Context(), userOf(r).ID, tokenOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.Session{"sessions": list})
}

// handleEndSession ends one of the caller's sessions; another user's id
// answers 404 as an unknown one does.
func (s *Server) handleEndSession(w http.ResponseWriter, r *http.Request) {
	hash, err := s.chat.EndSession(r.Context(), userOf(r).ID, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.revoke([][]byte{hash})
	w.WriteHeader(http.StatusNoContent)
}

// handleEndSessions ends every session of the caller but its own; the
// query must say so (?others=true), so that a bare DELETE on the
// collection does not log out everywhere by accident.
func (s *Server) handleEndSessions(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("others") != "true" {
		s.writeError(w, r, chat.Errorf(chat.EBadRequest, "DELETE /api/v1/sessions needs ?others=true (to end one session: DELETE /api/v1/sessions/{id})"))
		return
	}
	hashes, err := s.chat.EndOtherSessions(r.Context(), userOf(r).ID, tokenOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.revoke(hashes)
	w.WriteHeader(http.StatusNoContent)
}

type passwordChange struct {
	OldPassword string `json:"old_password"`
	NewPassword string `json:"new_password"`
}

func (s *Server) handlePassword(w http.ResponseWriter, r *http.Request) {
	var c passwordChange
	if err := s.decode(w, r, &c); err != nil {
		s.writeError(w, r, err)
		return
	}
	hashes, err := s.chat.ChangePassword(r.Context(), userOf(r), tokenOf(r), c.OldPassword, c.NewPassword)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.revoke(hashes)
	w.WriteHeader(http.StatusNoContent)
}

type ticketReply struct {
	Ticket    string `json:"ticket"`
	ExpiresAt int64  `json:"expires_at"`
}

func (s *Server) handleTicket(w http.ResponseWriter, r *http.Request) {
	t, exp, err := s.chat.NewTicket(r.Context(), userOf(r).ID, tokenOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, ticketReply{Ticket: t, ExpiresAt: exp})
}

// revoke closes the live sockets of ended sessions, here and (through the
// bus) on the other processes: the path logout takes.
func (s *Server) revoke(hashes [][]byte) {
	for _, h := range hashes {
		s.hub.revokeToken(hex.EncodeToString(h))
	}
}
