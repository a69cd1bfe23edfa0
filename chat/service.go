package chat

import (
	"log/slog"
	"sync"
	"time"
)

// Config holds the domain's limits and intervals.
type Config struct {
	MaxBodyBytes int
	SendRate     float64 // messages per second per user
	SendBurst    int
	// RegistrationOpen is the v1 switch; Registration (open, invite or
	// closed) overrides it when set.
	RegistrationOpen bool
	Registration     string
	// AckFlushInterval is how long receive acks wait in memory before they
	// are written in one batch.
	AckFlushInterval time.Duration
	// ReceiptInterval is how often group receipts are coalesced into one
	// frame per member.
	ReceiptInterval time.Duration
	// DedupEntries bounds the recent client_msg_id cache.
	DedupEntries int
	// Storm sets storm mode for busy groups; off when Storm.Threshold is 0.
	Storm StormConfig
	// Admins are the usernames that may use the admin API.
	Admins []string
	// Events receives outbound events (storm alerts); nil drops them.
	Events EventQueue
	// Observer is told what the metrics count; nil tells no one.
	Observer Observer
	// Peers are the other processes sharing the store; nil when alone.
	Peers Peers
	// TokenIdle ends a session unused this long; 0 never does.
	TokenIdle time.Duration
	// TokenMaxAge ends a session this old; 0 never does.
	TokenMaxAge time.Duration
	// SessionFlushInterval is how often sessions' last uses are written:
	// at most one write per token per interval.
	SessionFlushInterval time.Duration
	// PasswordFailures and PasswordRefill bound wrong old passwords in a
	// password change per user: a bucket of PasswordFailures, one back
	// every PasswordRefill.
	PasswordFailures int
	PasswordRefill   time.Duration
	// TicketTTL is how long a WebSocket ticket may wait for its use
	// (PROTOCOL.md: 30 s; tests shorten it).
	TicketTTL time.Duration
	// Push sends Web Push notifications; off without a Sender.
	Push PushConfig
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 16384
	}
	if c.SendRate <= 0 {
		c.SendRate = 50
	}
	if c.SendBurst <= 0 {
		c.SendBurst = 200
	}
	if c.AckFlushInterval <= 0 {
		c.AckFlushInterval = 200 * time.Millisecond
	}
	if c.ReceiptInterval <= 0 {
		c.ReceiptInterval = time.Second
	}
	if c.DedupEntries <= 0 {
		c.DedupEntries = 100_000
	}
	if c.SessionFlushInterval <= 0 {
		c.SessionFlushInterval = time.Minute
	}
	if c.TicketTTL <= 0 {
		c.TicketTTL = 30 * time.Second
	}
	if c.PasswordFailures <= 0 {
		c.PasswordFailures = 10
	}
	if c.PasswordRefill <= 0 {
		c.PasswordRefill = time.Minute
	}
	c.Storm.setDefaults()
	if c.Registration == "" {
		c.Registration = RegisterClosed
		if c.RegistrationOpen {
			c.Registration = RegisterOpen
		}
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
}

// Service is the chat domain: every use case of the protocol, independent of
// transport and storage.
type Service struct {
	store   Store
	deliver Deliverer
	cfg     Config
	log     *slog.Logger

	rosters *rosterCache
	dedup   *recentIDs
	limits  *sendLimits
	// retryLookups bounds the sends over the limit that the store is
	// asked about as possible retries (checkSend).
	retryLookups *sendLimits
	acks         *ackBuffer
	maxSeqs      maxSeqs
	receipts     *receiptBuffer
	hashing      chan struct{} // bounds concurrent password hashing (memory-hard)
	uses         *sessionUses
	pwFailures   *sendLimits
	storm        *stormMode // nil when storm mode is off
	obs          Observer
	typing       typingLimiter
	online       onlineHook
	notify       *notifier // nil when push is off

	commits chan commit
	stop    chan struct{}
	wg      sync.WaitGroup
}

// NewService returns a running service. Call Committed from the store's
// commit hook and Close on shutdown.
func NewService(store Store, deliver Deliverer, cfg Config, log *slog.Logger) *Service {
	cfg.setDefaults()
	s := &Service{
		store:        store,
		deliver:      deliver,
		cfg:          cfg,
		log:          log,
		rosters:      newRosterCache(),
		dedup:        newRecentIDs(cfg.DedupEntries),
		limits:       newSendLimits(cfg.SendRate, cfg.SendBurst),
		retryLookups: newSendLimits(cfg.SendRate, cfg.SendBurst),
		acks:         newAckBuffer(),
		receipts:     newReceiptBuffer(),
		hashing:      make(chan struct{}, 2),
		uses:         newSessionUses(),
		pwFailures:   newSendLimits(1/cfg.PasswordRefill.Seconds(), cfg.PasswordFailures),
		storm:        newStormMode(cfg.Storm),
		obs:          cfg.Observer,
		commits:      make(chan commit, 1024),
		stop:         make(chan struct{}),
	}
	s.notify = newNotifier(s, cfg.Push)
	s.wg.Add(4)
	go s.flushSessionUsesLoop()
	go s.dispatch()
	go s.flushAcksLoop()
	go s.flushReceiptsLoop()
	if s.storm != nil {
		s.wg.Add(1)
		go s.stormMonitor()
	}
	return s
}

// Close flushes pending acks and receipts and stops the background work.
// The store must still be open.
func (s *Service) Close() {
	close(s.stop)
	s.wg.Wait()
	if s.notify != nil {
		s.notify.close()
	}
}

// Peers are the other processes that share the store (through Redis).
type Peers interface {
	// RosterChanged tells them to reload conv's members.
	RosterChanged(conv string)
}

// membershipChanged drops conv's cached members ("": every conversation's)
// here and in the other processes, so that sends are checked against the
// members as they are. Fan-out does not wait for that news: a message
// committed after the change carries the members' newer version, and the
// fan-out of any process reads them again (fanOut).
func (s *Service) membershipChanged(conv string) {
	s.rosters.forget(conv)
	if s.cfg.Peers != nil {
		s.cfg.Peers.RosterChanged(conv)
	}
}

// ForgetRoster drops conv's cached members after another process changed
// them; "" drops all.
func (s *Service) ForgetRoster(conv string) { s.rosters.forget(conv) }

// ObserveRemote learns of messages another process committed.
func (s *Service) ObserveRemote(msgs []Message) { s.maxSeqs.advance(msgs) }

// Config returns the configuration in force, defaults filled in.
func (s *Service) Config() Config { return s.cfg }
