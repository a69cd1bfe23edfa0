package server

import (
	"net/http"

	"github.com/imserver/imserver/chat"
)

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	before, err := queryInt(r, "before_seq", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := queryLimit(r, chat.MaxSearchLimit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.chat.Search(r.Context(), userOf(r).ID, q.Get("q"), q.Get("conv"), before, q.Get("cursor"), limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
