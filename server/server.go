// Package server is imserver's transport: HTTP routes, WebSocket sessions,
// authentication, the hub that delivers events to sessions, and metrics.
package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/imserver/imserver/chat"
)

// Config holds the transport's settings.
type Config struct {
	MaxRequestBytes int64
	MaxFrameBytes   int64
	// AllowedOrigins are host patterns (path.Match syntax) a browser page may
	// open the WebSocket from, besides its own origin; "*" allows any.
	AllowedOrigins []string
	// SessionQueue bounds the frames waiting for one session.
	SessionQueue int
	WriteTimeout time.Duration
	// WriteDelay holds a session's writer this long after it is woken, so
	// that frames queued meanwhile (the next commits' messages) share its
	// write; 0 writes at once.
	WriteDelay time.Duration
	// Pprof serves net/http/pprof at /debug/pprof/.
	Pprof bool
	// MetricsToken is the bearer token a scraper reads /metrics with;
	// admins' own tokens work too.
	MetricsToken string
	// Files serves uploads; nil turns the file routes off.
	Files *Files
	// ReadTimeout bounds how long an HTTP request's body may take to
	// arrive, and APIWriteTimeout how long its answer may take to leave.
	// Both are set per request, so the WebSocket keeps its own deadlines.
	ReadTimeout     time.Duration
	APIWriteTimeout time.Duration
	// MaxSessionsPerUser bounds one user's open sockets on this process.
	MaxSessionsPerUser int
	// PresenceGrace is how long a user whose last session closed still
	// counts as online (a reload does not flicker). The contract says the
	// "offline" comes within 5 s: the default, 4 s, leaves room for the
	// settling and delivery after the timer (config refuses more than 5 s).
	PresenceGrace time.Duration
	// Version, Commit and Schema (the database's newest applied migration)
	// are reported by /healthz.
	Version, Commit string
	Schema          int

	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (see ClientAddr).
	TrustedProxies []netip.Prefix
	// LoginFailures is the bucket of failed logins per username and per
	// client address, refilled one a minute; 0 turns the limit off.
	LoginFailures int
	// RegisterPerHour bounds registrations per client address; 0: none.
	RegisterPerHour int
	// PublicURL is the server's address as users reach it (invite links);
	// empty takes the request's.
	PublicURL string
	// HSTS sends Strict-Transport-Security (the server is serving TLS).
	HSTS bool
	// Push sends Web Push notifications; nil when they are off.
	Push *PushSender
	// PushAllowPrivate accepts subscriptions on private addresses (tests).
	PushAllowPrivate bool
}

func (c *Config) setDefaults() {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 65536
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 65536
	}
	if c.SessionQueue <= 0 {
		c.SessionQueue = 512
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.APIWriteTimeout <= 0 {
		c.APIWriteTimeout = 30 * time.Second
	}
	if c.MaxSessionsPerUser <= 0 {
		c.MaxSessionsPerUser = 32
	}
	if c.PresenceGrace <= 0 || c.PresenceGrace > 5*time.Second {
		c.PresenceGrace = 4 * time.Second
	}
}

// Pinger checks a dependency for /healthz.
type Pinger func(context.Context) error

// Server serves the protocol.
type Server struct {
	cfg     Config
	chat    *chat.Service
	hub     *Hub
	metrics *Metrics
	log     *slog.Logger
	ui      http.Handler
	health  map[string]Pinger

	presence *presence
	sockets  *socketCap
	guard    *guard
	started  time.Time

	closing atomic.Bool // Shutdown began: no session may start
	http    *http.Server
	mux     *http.ServeMux

	// keepAliveLoop's (keepalive.go): Shutdown ends it.
	keepStop      chan struct{}
	keepDone      chan struct{}
	stopKeepAlive sync.Once
}

// New returns a server; ui (may be nil) is served at "/".
func New(cfg Config, svc *chat.Service, hub *Hub, m *Metrics, ui http.Handler, health map[string]Pinger, log *slog.Logger) *Server {
	cfg.setDefaults()
	s := &Server{cfg: cfg, chat: svc, hub: hub, metrics: m, log: log, ui: ui, health: health,
		guard: newGuard(cfg.LoginFailures, cfg.RegisterPerHour), started: time.Now()}
	s.presence = newPresence(s, cfg.PresenceGrace, log)
	s.sockets = newSocketCap(log)
	svc.SetOnline(s.presence.online)
	s.mux = s.routes()
	s.keepStop, s.keepDone = make(chan struct{}), make(chan struct{})
	go s.keepAliveLoop()
	s.http = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s
}

// ServeHTTP serves the routes. Every request gets its deadlines here: a
// body that trickles in is cut after ReadTimeout, an answer the client
// does not take after APIWriteTimeout. The WebSocket's are cleared instead
// (a keep-alive connection carries the last request's deadlines), since a
// socket lives long and its session sets its own.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.HSTS {
		w.Header().Set("Strict-Transport-Security", "max-age=63072000")
	}
	rc := http.NewResponseController(w)
	if r.URL.Path == wsPath {
		rc.SetReadDeadline(time.Time{})
		rc.SetWriteDeadline(time.Time{})
	} else {
		now := time.Now()
		rc.SetReadDeadline(now.Add(s.cfg.ReadTimeout))
		rc.SetWriteDeadline(now.Add(s.cfg.APIWriteTimeout))
	}
	ctx := chat.WithClient(r.Context(), chat.Client{UserAgent: r.UserAgent(), Address: s.clientAddress(r)})
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

// handleUnknownAPI answers API paths no route takes with the protocol's
// JSON errors instead of the mux's plain text: 405 with the methods the
// path takes in Allow when it exists with others, 404 otherwise.
func (s *Server) handleUnknownAPI(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" && p != "/api/" && p != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeError(w, r, &chat.Error{Code: eMethodNotAllowed, Message: r.Method + " is not allowed here"})
		return
	}
	s.writeError(w, r, chat.Errorf(chat.ENotFound, "no such endpoint"))
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.http.Serve(l)
	if err == http.ErrServerClosed {
		return nil
	}
	return err
}

// Shutdown stops accepting, ends open requests within ctx and closes every
// WebSocket with status going away.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	err := s.http.Shutdown(ctx)
	s.hub.CloseAll()
	// Cutting the connections aborts their closing handshakes, and clients
	// would see them drop without the going-away status: wait (within
	// ctx) for the sessions to end first, then cut what is left.
	for len(s.hub.sessions()) > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, ss := range s.hub.sessions() {
		ss.conn.CloseNow()
		ss.cancel()
	}
	s.presence.close()
	s.stopKeepAlive.Do(func() { close(s.keepStop) })
	<-s.keepDone
	return err
}
