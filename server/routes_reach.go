package server

import "net/http"

// reachRoutes are invites, mutes, Web Push and the admin page's API.
func (s *Server) reachRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /api/v1/invites", s.authed(s.handleCreateInvite))
	m.HandleFunc("GET /api/v1/invites", s.authed(s.handleInvites))
	m.HandleFunc("DELETE /api/v1/invites/{code}", s.authed(s.handleRevokeInvite))

	m.HandleFunc("POST /api/v1/conversations/{id}/mute", s.authed(s.handleMute))
	m.HandleFunc("POST /api/v1/conversations/{id}/unmute", s.authed(s.handleUnmute))

	m.HandleFunc("GET /api/v1/push/key", s.authed(s.handlePushKey))
	m.HandleFunc("POST /api/v1/push/subscriptions", s.authed(s.handleSubscribe))
	m.HandleFunc("DELETE /api/v1/push/subscriptions", s.authed(s.handleUnsubscribe))

	m.HandleFunc("GET /api/v1/admin/users", s.authed(s.handleAdminUsers))
	m.HandleFunc("POST /api/v1/admin/users/{id}/disable", s.authed(s.setDisabled(true)))
	m.HandleFunc("POST /api/v1/admin/users/{id}/enable", s.authed(s.setDisabled(false)))
	m.HandleFunc("POST /api/v1/admin/users/{id}/password", s.authed(s.handleResetPassword))
	m.HandleFunc("GET /api/v1/admin/invites", s.authed(s.handleAdminInvites))
	m.HandleFunc("GET /api/v1/admin/status", s.authed(s.handleAdminStatus))

	if s.ui != nil {
		// The join page is the UI's, at the invite's URL.
		m.HandleFunc("GET /join/{code}", s.handleJoinPage)
		m.HandleFunc("GET /sw.js", s.handleServiceWorker)
	}
}

// handleJoinPage serves the UI's page; its script sees /join/CODE.
func (s *Server) handleJoinPage(w http.ResponseWriter, r *http.Request) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/"
	r2.URL.RawPath = ""
	w.Header().Set("Referrer-Policy", "no-referrer") // the code is in the URL
	s.ui.ServeHTTP(w, r2)
}

// handleServiceWorker serves the service worker with the whole site as
// its scope.
func (s *Server) handleServiceWorker(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Service-Worker-Allowed", "/")
	w.Header().Set("Cache-Control", "no-cache")
	s.ui.ServeHTTP(w, r)
}
