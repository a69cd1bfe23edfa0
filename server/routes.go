package server

import (
	"context"
	"net/http"
	"net/http/pprof"
	"time"
)

// route is one documented endpoint: every route of apiRoutes is described
// in openapi.json, and a test fails when the two disagree.
type route struct {
	method, pattern string
	handler         http.Handler
}

func (s *Server) apiRoutes() []route {
	h := func(f http.HandlerFunc) http.Handler { return f }
	a := func(f http.HandlerFunc) http.Handler { return s.authed(f) }
	return []route{
		{"POST", "/api/v1/auth/register", h(s.handleRegister)},
		{"POST", "/api/v1/auth/login", h(s.handleLogin)},
		{"POST", "/api/v1/auth/logout", a(s.handleLogout)},
		{"GET", "/api/v1/me", a(s.handleMe)},
		{"GET", "/api/v1/users", a(s.handleUsers)},

		{"GET", "/api/v1/sequences", a(s.handleSequences)},
		{"GET", "/api/v1/conversations", a(s.handleChanges)},
		{"POST", "/api/v1/conversations/direct", a(s.handleDirect)},
		{"POST", "/api/v1/groups", a(s.handleGroup)},
		{"GET", "/api/v1/conversations/{id}", a(s.handleConversation)},
		{"GET", "/api/v1/conversations/{id}/members", a(s.handleMembers)},
		{"POST", "/api/v1/conversations/{id}/members", a(s.handleAddMembers)},
		{"DELETE", "/api/v1/conversations/{id}/members/{user_id}", a(s.handleKick)},
		{"POST", "/api/v1/conversations/{id}/leave", a(s.handleLeave)},
		{"POST", "/api/v1/conversations/{id}/clear", a(s.handleClear)},
		{"POST", "/api/v1/conversations/{id}/ack", a(s.handleAck)},
		{"POST", "/api/v1/conversations/{id}/read", a(s.handleRead)},
		{"POST", "/api/v1/conversations/{id}/messages", a(s.handleSend)},
		{"GET", "/api/v1/conversations/{id}/messages", a(s.handleMessages)},

		{"GET", "/api/v1/admin/storms", a(s.handleStorms)},

		{"GET", "/api/v1/ws", h(s.handleWS)},
		{"GET", "/api/v1/openapi.json", h(serveOpenAPI)},
		{"GET", "/healthz", h(s.handleHealth)},
		{"GET", "/metrics", s.metrics.Handler()},
	}
}

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	for _, r := range s.apiRoutes() {
		m.Handle(r.method+" "+r.pattern, r.handler)
	}
	m.HandleFunc("/api/", s.handleUnknownAPI)
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
	writeJSON(w, code, map[string]any{"status": status, "checks": checks,
		"version": s.cfg.Version, "commit": s.cfg.Commit, "schema": s.cfg.Schema})
}
