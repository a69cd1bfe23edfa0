package server

import "net/http"

// reachRoutes are invites, mutes, Web Push and the admin page's API (in
// the documented route table).
func (s *Server) reachRoutes(authed func(http.HandlerFunc) http.Handler) []route {
	return []route{
		{"POST", "/api/v1/invites", authed(s.handleCreateInvite)},
		{"GET", "/api/v1/invites", authed(s.handleInvites)},
		{"DELETE", "/api/v1/invites/{code}", authed(s.handleRevokeInvite)},

		{"POST", "/api/v1/conversations/{id}/mute", authed(s.handleMute)},
		{"POST", "/api/v1/conversations/{id}/unmute", authed(s.handleUnmute)},

		{"GET", "/api/v1/push/key", authed(s.handlePushKey)},
		{"POST", "/api/v1/push/subscriptions", authed(s.handleSubscribe)},
		{"DELETE", "/api/v1/push/subscriptions", authed(s.handleUnsubscribe)},

		{"GET", "/api/v1/admin/users", authed(s.handleAdminUsers)},
		{"POST", "/api/v1/admin/users/{id}/disable", authed(s.setDisabled(true))},
		{"POST", "/api/v1/admin/users/{id}/enable", authed(s.setDisabled(false))},
		{"POST", "/api/v1/admin/users/{id}/password", authed(s.handleResetPassword)},
		{"GET", "/api/v1/admin/invites", authed(s.handleAdminInvites)},
		{"GET", "/api/v1/admin/status", authed(s.handleAdminStatus)},
	}
}

// uiRoutes are the UI's pages outside "/": the join page at an invite's
// URL and the service worker.
func (s *Server) uiRoutes(m *http.ServeMux) {
	if s.ui == nil {
		return
	}
	m.HandleFunc("GET /join/{code}", s.handleJoinPage)
	m.HandleFunc("GET /sw.js", s.handleServiceWorker)
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
