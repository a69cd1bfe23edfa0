package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/imserver/imserver/chat"
)

// route is one documented endpoint: every route of apiRoutes is described
// in openapi.json, and a test fails when the two disagree.
type route struct {
	method, pattern string
	handler         http.Handler
}

func (s *Server) apiRoutes() []route {
	// public routes need no token; authed ones answer 401 without one.
	public := func(f http.HandlerFunc) http.Handler { return f }
	authed := func(f http.HandlerFunc) http.Handler { return s.authed(f) }
	return append([]route{
		{"POST", "/api/v1/auth/register", public(s.handleRegister)},
		{"POST", "/api/v1/auth/login", public(s.handleLogin)},
		{"POST", "/api/v1/auth/logout", authed(s.handleLogout)},
		{"GET", "/api/v1/me", authed(s.handleMe)},
		{"GET", "/api/v1/users", authed(s.handleUsers)},

		{"GET", "/api/v1/sequences", authed(s.handleSequences)},
		{"GET", "/api/v1/conversations", authed(s.handleChanges)},
		{"POST", "/api/v1/conversations/direct", authed(s.handleDirect)},
		{"POST", "/api/v1/groups", authed(s.handleGroup)},
		{"GET", "/api/v1/conversations/{id}", authed(s.handleConversation)},
		{"GET", "/api/v1/conversations/{id}/members", authed(s.handleMembers)},
		{"POST", "/api/v1/conversations/{id}/members", authed(s.handleAddMembers)},
		{"DELETE", "/api/v1/conversations/{id}/members/{user_id}", authed(s.handleKick)},
		{"PATCH", "/api/v1/conversations/{id}/members/{user_id}", authed(s.handleSetRole)},
		{"PATCH", "/api/v1/conversations/{id}", authed(s.handleRename)},
		{"POST", "/api/v1/conversations/{id}/leave", authed(s.handleLeave)},
		{"POST", "/api/v1/conversations/{id}/clear", authed(s.handleClear)},
		{"POST", "/api/v1/conversations/{id}/ack", authed(s.handleAck)},
		{"POST", "/api/v1/conversations/{id}/read", authed(s.handleRead)},
		{"POST", "/api/v1/conversations/{id}/messages", authed(s.handleSend)},
		{"GET", "/api/v1/conversations/{id}/messages", authed(s.handleMessages)},
		{"GET", "/api/v1/search", authed(s.handleSearch)},

		{"POST", "/api/v1/files", authed(s.handleUpload)},
		// Files take the token or a signed link (for <img>): fileOf checks.
		{"GET", "/api/v1/files/{id}", public(s.handleFile)},
		{"GET", "/api/v1/files/{id}/thumb", public(s.handleThumb)},

		{"GET", "/api/v1/admin/storms", authed(s.handleStorms)},

		{"GET", "/api/v1/sessions", authed(s.handleSessions)},
		{"DELETE", "/api/v1/sessions", authed(s.handleEndSessions)},
		{"DELETE", "/api/v1/sessions/{id}", authed(s.handleEndSession)},
		{"POST", "/api/v1/auth/password", authed(s.handlePassword)},
		{"POST", "/api/v1/auth/ticket", authed(s.handleTicket)},

		{"GET", wsPath, public(s.handleWS)},
		{"GET", "/api/v1/openapi.json", public(serveOpenAPI)},
		{"GET", "/healthz", public(s.handleHealth)},
		{"GET", "/metrics", s.metricsGate(s.metrics.Handler())},
	}, s.reachRoutes(authed)...)
}

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	for _, r := range s.apiRoutes() {
		m.Handle(r.method+" "+r.pattern, r.handler)
	}
	s.uiRoutes(m)
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
// healthReason is what /healthz, which needs no token, says of a failed
// check: the reason a store or the bus gave in the domain's words, not a
// driver's error, which may name the database's host, user and database
// (that goes to the log).
func healthReason(err error) string {
	var ce *chat.Error
	if errors.As(err, &ce) {
		return ce.Message
	}
	return err.Error()
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := make(map[string]string, len(s.health))
	status, healthy := "ok", true
	for name, ping := range s.health {
		if err := ping(ctx); err != nil {
			checks[name] = healthReason(err)
			if checks[name] != err.Error() {
				s.log.Warn("health check failed", "check", name, "err", err)
			}
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
