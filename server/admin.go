package server

import "net/http"

// handleStorms lists the groups in storm mode (admins only: auth.admins).
func (s *Server) handleStorms(w http.ResponseWriter, r *http.Request) {
	storms, err := s.chat.Storms(r.Context(), userOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"storms": storms})
}
