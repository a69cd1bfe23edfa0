package server

import (
	"net/http"
)

func (s *Server) handleMute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UntilMS int64 `json:"until_ms"`
	}
	// The body is optional: no body mutes until unmuted.
	if err := s.decodeOptional(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.chat.Mute(r.Context(), userOf(r).ID, r.PathValue("id"), req.UntilMS); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleUnmute(w http.ResponseWriter, r *http.Request) {
	if err := s.chat.Unmute(r.Context(), userOf(r).ID, r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
