package server

import (
	"net/http"

	"github.com/imserver/imserver/chat"
)

type conversationReply struct {
	Conversation chat.Conversation `json:"conversation"`
}

func (s *Server) handleSequences(w http.ResponseWriter, r *http.Request) {
	v, err := s.chat.MaxVersion(r.Context(), userOf(r).ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sequences{Conversations: v})
}

func (s *Server) handleChanges(w http.ResponseWriter, r *http.Request) {
	since, err := queryInt(r, "since", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	limit, err := queryLimit(r, chat.MaxPageLimit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ch, err := s.chat.Changes(r.Context(), userOf(r).ID, since, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ch)
}

// queryLimit reads a page limit: absent means the default (0), larger
// than most is clamped, zero or negative is an error.
func queryLimit(r *http.Request, most int) (int, error) {
	l, err := queryLimitInt(r)
	if err != nil {
		return 0, err
	}
	if r.URL.Query().Has("limit") && l < 1 {
		return 0, chat.Errorf(chat.EBadRequest, "limit must be >= 1")
	}
	return int(min(l, int64(most))), nil
}

func (s *Server) handleDirect(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UserID string `json:"user_id"`
	}
	if err := s.decode(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, created, err := s.chat.CreateDirect(r.Context(), userOf(r).ID, body.UserID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, conversationReply{c})
}

func (s *Server) handleGroup(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name      string   `json:"name"`
		MemberIDs []string `json:"member_ids"`
	}
	if err := s.decode(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.chat.CreateGroup(r.Context(), userOf(r).ID, body.Name, body.MemberIDs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, conversationReply{c})
}

func (s *Server) handleConversation(w http.ResponseWriter, r *http.Request) {
	c, err := s.chat.Conversation(r.Context(), userOf(r).ID, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, conversationReply{c})
}

func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	ms, err := s.chat.Members(r.Context(), userOf(r).ID, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.Member{"members": ms})
}

func (s *Server) handleAddMembers(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UserIDs []string `json:"user_ids"`
	}
	if err := s.decode(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	me, conv := userOf(r).ID, r.PathValue("id")
	added, err := s.chat.AddMembers(r.Context(), me, conv, body.UserIDs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.chat.Conversation(r.Context(), me, conv)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if added == nil {
		added = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation": c, "added": added})
}

func (s *Server) handleKick(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, r, s.chat.Kick(r.Context(), userOf(r).ID, r.PathValue("id"), r.PathValue("user_id")))
}

func (s *Server) handleSetRole(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Role string `json:"role"`
	}
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.noContent(w, r, s.chat.SetRole(r.Context(), userOf(r).ID, r.PathValue("id"), r.PathValue("user_id"), req.Role))
}

func (s *Server) handleLeave(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, r, s.chat.Leave(r.Context(), userOf(r).ID, r.PathValue("id")))
}

func (s *Server) handleClear(w http.ResponseWriter, r *http.Request) {
	s.noContent(w, r, s.chat.Clear(r.Context(), userOf(r).ID, r.PathValue("id")))
}

func (s *Server) noContent(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleRename renames a group: PATCH /api/v1/conversations/{id} {name}.
func (s *Server) handleRename(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"name"`
	}
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.chat.RenameGroup(r.Context(), userOf(r).ID, r.PathValue("id"), req.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]chat.Conversation{"conversation": c})
}
