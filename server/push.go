package server

import (
	"context"
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/imserver/imserver/chat"
	"github.com/prometheus/client_golang/prometheus"
)

// PushOptions configure the Web Push sender.
type PushOptions struct {
	// Subscriber is the VAPID contact push services may write to: an
	// e-mail address (with or without mailto:) or an https URL.
	Subscriber string
	// AllowPrivate lets endpoints be on loopback and private addresses
	// (tests); otherwise a subscription cannot make the server call into
	// its own network.
	AllowPrivate bool
	// Timeout bounds one request to a push service.
	Timeout time.Duration
	// QueueSize bounds the pushes waiting; past it new ones are dropped.
	QueueSize int
	// Workers send in parallel.
	Workers int
	// Attempts per push (first try included); Backoff is the wait before
	// the first retry, doubled for each next.
	Attempts int
	Backoff  time.Duration
	// TTL is how long a push service keeps a push for an offline device.
	TTL time.Duration
	// Transport replaces the HTTP transport (tests trust their own CA
	// with it); the private-address check is then the transport's affair.
	Transport http.RoundTripper
}

func (o *PushOptions) setDefaults() {
	if o.Subscriber == "" {
		o.Subscriber = "admin@localhost"
	}
	// webpush-go adds "mailto:" to anything that is not an https URL.
	o.Subscriber = strings.TrimPrefix(o.Subscriber, "mailto:")
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1000
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 2 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
}

// Names of the VAPID keys in the settings table.
const (
	vapidPrivateSetting = "vapid_private_key"
	vapidPublicSetting  = "vapid_public_key"
)

// PushSender sends Web Push notifications (RFC 8030, encrypted per RFC
// 8291 and signed per RFC 8292 by webpush-go) through a bounded queue with
// retries. It implements chat.Pusher.
type PushSender struct {
	opts   PushOptions
	log    *slog.Logger
	client *http.Client
	svc    *chat.Service

	public, private string

	queue  chan *pushJob
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool

	sent, failed, retries, dropped, gone prometheus.Counter
	queued                               prometheus.Gauge
}

type pushJob struct {
	sub     chat.PushSubscription
	payload []byte
	topic   string
	attempt int
}

var _ chat.Pusher = (*PushSender)(nil)

// NewPushSender returns a sender; Start it once the service exists.
func NewPushSender(opts PushOptions, m *Metrics, log *slog.Logger) *PushSender {
	opts.setDefaults()
	p := &PushSender{opts: opts, log: log, queue: make(chan *pushJob, opts.QueueSize)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	tr := opts.Transport
	if tr == nil {
		d := &net.Dialer{Timeout: opts.Timeout, Control: dialControl(opts.AllowPrivate)}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = d.DialContext
		t.Proxy = nil
		tr = t
	}
	p.client = &http.Client{Transport: tr, Timeout: opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_push_" + name, Help: help})
	}
	p.sent = c("sent_total", "Pushes accepted by a push service.")
	p.failed = c("failed_total", "Pushes given up after every attempt.")
	p.retries = c("retries_total", "Push attempts retried.")
	p.dropped = c("dropped_total", "Pushes dropped because the queue was full.")
	p.gone = c("subscriptions_gone_total", "Subscriptions dropped because their push service answered 404 or 410.")
	p.queued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "imserver_push_queue", Help: "Pushes waiting to be sent."})
	if m != nil {
		m.Registry.MustRegister(p.sent, p.failed, p.retries, p.dropped, p.gone, p.queued)
	}
	return p
}

// Start loads the VAPID keys (generating them the first time: the first
// process to store them wins) and starts the workers.
func (p *PushSender) Start(ctx context.Context, svc *chat.Service) error {
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		return err
	}
	// One row holds both so that two processes starting at once cannot
	// mix one's private key with the other's public one.
	stored, err := svc.InitSetting(ctx, vapidPrivateSetting, []byte(priv+" "+pub))
	if err != nil {
		return fmt.Errorf("vapid keys: %w", err)
	}
	p.private, p.public, _ = strings.Cut(string(stored), " ")
	if p.public == "" {
		return errors.New("vapid keys: the stored value is damaged")
	}
	p.svc = svc
	for range p.opts.Workers {
		p.wg.Add(1)
		go p.work()
	}
	return nil
}

// PublicKey is the VAPID public key browsers subscribe with.
func (p *PushSender) PublicKey() string { return p.public }

// Push implements chat.Pusher: it queues and never waits.
func (p *PushSender) Push(sub chat.PushSubscription, n chat.Notification) {
	payload, err := json.Marshal(n)
	if err != nil {
		p.log.Error("push payload", "err", err)
		return
	}
	sum := sha256.Sum256([]byte(n.Conv))
	// Topic (RFC 8030 5.4): at most 32 URL-safe base64 characters; a
	// newer push of the conversation replaces one the service still holds.
	p.enqueue(&pushJob{sub: sub, payload: payload, topic: base64.RawURLEncoding.EncodeToString(sum[:24])})
}

func (p *PushSender) enqueue(j *pushJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- j:
		p.queued.Inc()
	default:
		p.dropped.Inc()
	}
}

func (p *PushSender) work() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case j := <-p.queue:
			p.queued.Dec()
			p.send(j)
		}
	}
}

// errGone marks a subscription its push service no longer knows.
var errGone = errors.New("subscription gone")

func (p *PushSender) send(j *pushJob) {
	err := p.attempt(j)
	switch {
	case err == nil:
		p.sent.Inc()
	case errors.Is(err, errGone):
		p.gone.Inc()
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		if err := p.svc.DropPushSubscription(ctx, j.sub.Endpoint); err != nil {
			p.log.Warn("dropping push subscription", "err", err)
		}
	case j.attempt+1 >= p.opts.Attempts || p.ctx.Err() != nil:
		p.failed.Inc()
		p.log.Info("push failed", "host", hostOf(j.sub.Endpoint), "attempts", j.attempt+1, "err", err)
	default:
		p.retries.Inc()
		wait := p.opts.Backoff << j.attempt
		j.attempt++
		time.AfterFunc(wait, func() { p.enqueue(j) })
	}
}

// pushRejected is an answer that retrying will not change.
type pushRejected struct{ status int }

func (e pushRejected) Error() string { return fmt.Sprintf("push service answered %d", e.status) }

func (p *PushSender) attempt(j *pushJob) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.Timeout)
	defer cancel()
	resp, err := webpush.SendNotificationWithContext(ctx, j.payload, &webpush.Subscription{
		Endpoint: j.sub.Endpoint,
		Keys:     webpush.Keys{P256dh: j.sub.P256dh, Auth: j.sub.Auth},
	}, &webpush.Options{
		HTTPClient:      p.client,
		Subscriber:      p.opts.Subscriber,
		Topic:           j.topic,
		TTL:             int(p.opts.TTL.Seconds()),
		Urgency:         webpush.UrgencyHigh,
		VAPIDPublicKey:  p.public,
		VAPIDPrivateKey: p.private,
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return errGone
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("push service answered %d", resp.StatusCode)
	default:
		// 400, 401, 403, 413: the request itself is wrong; retrying
		// sends the same.
		j.attempt = p.opts.Attempts
		return pushRejected{resp.StatusCode}
	}
}

// Close stops the workers; queued pushes are dropped, requests in flight
// are cancelled.
func (p *PushSender) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

func hostOf(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Host
	}
	return ""
}

// publicAddr reports whether a is an address on the internet: not
// loopback, private, link-local, multicast or unspecified.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsLoopback() && !a.IsPrivate() && !a.IsLinkLocalUnicast() &&
		!a.IsLinkLocalMulticast() && !a.IsMulticast() && !a.IsUnspecified() && !a.IsInterfaceLocalMulticast()
}

// dialControl refuses connections to non-public addresses after name
// resolution, so that a host name pointing inside cannot get past the
// check made when the subscription was stored.
func dialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if !publicAddr(ap.Addr()) {
			return fmt.Errorf("push endpoint address %s is not public", ap.Addr())
		}
		return nil
	}
}

// Limits of a subscription.
const (
	maxEndpointLen = 2048
	p256dhLen      = 65 // an uncompressed P-256 point
	authLen        = 16
)

// checkSubscription validates what a browser sent: an https endpoint on a
// public host (unless allowPrivate), a P-256 public key and a 16-byte
// auth secret, in base64url (padding and the standard alphabet are taken
// too, as browsers and libraries differ).
func checkSubscription(sub chat.PushSubscription, allowPrivate bool) error {
	if sub.Endpoint == "" || len(sub.Endpoint) > maxEndpointLen {
		return chat.Errorf(chat.EBadRequest, "endpoint must be an https URL of at most %d bytes", maxEndpointLen)
	}
	u, err := url.Parse(sub.Endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return chat.Errorf(chat.EBadRequest, "endpoint must be an https URL")
	}
	if !allowPrivate {
		host := strings.ToLower(u.Hostname())
		if a, err := netip.ParseAddr(host); err == nil && !publicAddr(a) {
			return chat.Errorf(chat.EBadRequest, "endpoint must be on a public address")
		}
		if host == "localhost" || strings.HasSuffix(host, ".localhost") || !strings.Contains(host, ".") && !strings.Contains(host, ":") {
			return chat.Errorf(chat.EBadRequest, "endpoint must be on a public host")
		}
	}
	key, err := decodeKey(sub.P256dh)
	if err != nil {
		return chat.Errorf(chat.EBadRequest, "keys.p256dh is not base64url")
	}
	if len(key) != p256dhLen {
		return chat.Errorf(chat.EBadRequest, "keys.p256dh must be %d bytes (an uncompressed P-256 point), not %d", p256dhLen, len(key))
	}
	if _, err := ecdh.P256().NewPublicKey(key); err != nil {
		return chat.Errorf(chat.EBadRequest, "keys.p256dh is not a P-256 point")
	}
	auth, err := decodeKey(sub.Auth)
	if err != nil {
		return chat.Errorf(chat.EBadRequest, "keys.auth is not base64url")
	}
	if len(auth) != authLen {
		return chat.Errorf(chat.EBadRequest, "keys.auth must be %d bytes, not %d", authLen, len(auth))
	}
	return nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "+/") {
		return base64.RawStdEncoding.DecodeString(s)
	}
	return base64.RawURLEncoding.DecodeString(s)
}
