package server

import (
	"context"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/imserver/imserver/chat"
)

// handleStorms lists the groups in storm mode (admins only: auth.admins).
func (s *Server) handleStorms(w http.ResponseWriter, r *http.Request) {
	storms, err := s.chat.Storms(r.Context(), userOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"storms": storms})
}

func (s *Server) handleAdminUsers(w http.ResponseWriter, r *http.Request) {
	users, err := s.chat.AdminUsers(r.Context(), userOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.UserInfo{"users": users})
}

// setDisabled disables or enables a user. Disabling ends its sessions
// the way logout does: its tokens are deleted and their sockets closed,
// here and (through the bus) in the other processes.
func (s *Server) setDisabled(disabled bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hashes, err := s.chat.SetDisabled(r.Context(), userOf(r), r.PathValue("id"), disabled, time.Now().UnixMilli())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.revokeHashes(hashes)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) revokeHashes(hashes [][]byte) {
	for _, h := range hashes {
		s.hub.revokeToken(hex.EncodeToString(h))
	}
}

func (s *Server) handleResetPassword(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Password string `json:"password"`
	}
	if err := s.decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	hashes, err := s.chat.ResetPassword(r.Context(), userOf(r), r.PathValue("id"), req.Password)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.revokeHashes(hashes)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleAdminInvites(w http.ResponseWriter, r *http.Request) {
	list, err := s.chat.Invites(r.Context(), userOf(r), true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]chat.Invite{"invites": list})
}

// handleAdminStatus reports the version, uptime, sessions and health.
func (s *Server) handleAdminStatus(w http.ResponseWriter, r *http.Request) {
	if !s.chat.IsAdmin(userOf(r)) {
		s.writeError(w, r, chat.Errorf(chat.EForbidden, "admins only"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := make(map[string]string, len(s.health))
	for name, ping := range s.health {
		if err := ping(ctx); err != nil {
			checks[name] = err.Error()
		} else {
			checks[name] = "ok"
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"version":      s.cfg.Version,
		"started_at":   s.started.UnixMilli(),
		"sessions":     len(s.hub.sessions()),
		"registration": s.chat.Registration(),
		"push":         s.cfg.Push != nil,
		"checks":       checks,
	})
}
