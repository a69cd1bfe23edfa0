package server

import (
	"context"
	"net/http"
	"net/http/pprof"
	"time"
)

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("POST /api/v1/auth/register", s.handleRegister)
	m.HandleFunc("POST /api/v1/auth/login", s.handleLogin)
	m.HandleFunc("POST /api/v1/auth/logout", s.authed(s.handleLogout))
	m.HandleFunc("GET /api/v1/me", s.authed(s.handleMe))
	m.HandleFunc("GET /api/v1/users", s.authed(s.handleUsers))

	m.HandleFunc("GET /api/v1/sequences", s.authed(s.handleSequences))
	m.HandleFunc("GET /api/v1/conversations", s.authed(s.handleChanges))
	m.HandleFunc("POST /api/v1/conversations/direct", s.authed(s.handleDirect))
	m.HandleFunc("POST /api/v1/groups", s.authed(s.handleGroup))
	m.HandleFunc("GET /api/v1/conversations/{id}", s.authed(s.handleConversation))
	m.HandleFunc("GET /api/v1/conversations/{id}/members", s.authed(s.handleMembers))
	m.HandleFunc("POST /api/v1/conversations/{id}/members", s.authed(s.handleAddMembers))
	m.HandleFunc("DELETE /api/v1/conversations/{id}/members/{user_id}", s.authed(s.handleKick))
	m.HandleFunc("POST /api/v1/conversations/{id}/leave", s.authed(s.handleLeave))
	m.HandleFunc("POST /api/v1/conversations/{id}/clear", s.authed(s.handleClear))
	m.HandleFunc("POST /api/v1/conversations/{id}/ack", s.authed(s.handleAck))
	m.HandleFunc("POST /api/v1/conversations/{id}/read", s.authed(s.handleRead))
	m.HandleFunc("POST /api/v1/conversations/{id}/messages", s.authed(s.handleSend))
	m.HandleFunc("GET /api/v1/conversations/{id}/messages", s.authed(s.handleMessages))

	m.HandleFunc("POST /api/v1/files", s.authed(s.handleUpload))
	m.HandleFunc("GET /api/v1/files/{id}", s.handleFile)
	m.HandleFunc("GET /api/v1/files/{id}/thumb", s.handleThumb)

	m.HandleFunc("GET /api/v1/admin/storms", s.authed(s.handleStorms))

	m.HandleFunc("GET /api/v1/ws", s.handleWS)
	m.HandleFunc("/api/", s.handleUnknownAPI)
	m.HandleFunc("GET /healthz", s.handleHealth)
	m.Handle("GET /metrics", s.metrics.Handler())
	if s.cfg.Pprof {
		m.HandleFunc("/debug/pprof/", pprof.Index)
		m.HandleFunc("/debug/pprof/profile", pprof.Profile)
		m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if s.ui != nil {
		m.Handle("/", s.ui)
	}
	return m
}

// handleHealth answers 200 when every dependency answers, 503 with the
// failing ones otherwise.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := make(map[string]string, len(s.health))
	status, healthy := "ok", true
	for name, ping := range s.health {
		if err := ping(ctx); err != nil {
			checks[name] = err.Error()
			status, healthy = "degraded", false
		} else {
			checks[name] = "ok"
		}
	}
	code := http.StatusOK
	if !healthy {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": checks})
}
