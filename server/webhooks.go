package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
)

// Webhook is an outgoing webhook: events of its types are POSTed to URL as
// a JSON array.
type Webhook struct {
	URL string
	// Events are the event types it wants (e.g. "storm.started"); empty
	// means every type.
	Events []string
	// Secret signs each body: X-Imserver-Signature: sha256=<hex HMAC-SHA256
	// of the body>. Empty sends no signature.
	Secret string
}

// SignatureHeader carries a webhook body's HMAC.
const SignatureHeader = "X-Imserver-Signature"

// WebhookOptions tune delivery; zero values take the defaults.
type WebhookOptions struct {
	Timeout      time.Duration // per POST; default 5s
	Attempts     int           // POSTs of one batch before it is dropped; default 3
	Backoff      time.Duration // before the second attempt, doubling after; default 500ms
	BatchSize    int           // events taken from the queue at once; default 100
	PollInterval time.Duration // how often an empty queue is looked at again; default 250ms
	UserAgent    string
}

func (o *WebhookOptions) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 100
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.UserAgent == "" {
		o.UserAgent = "imserver"
	}
}

// Webhooks consumes the event queue (chat.EventsKey): one goroutine takes
// batches and POSTs each webhook the events it wants, all webhooks at once,
// with a timeout and a few retries, then drops (counted). Delivery is best
// effort, like the queue: what is taken and not delivered is gone.
type Webhooks struct {
	q       chat.EventQueue
	hooks   []Webhook
	wants   []map[string]bool // per hook; nil: everything
	opts    WebhookOptions
	client  *http.Client
	metrics *Metrics
	log     *slog.Logger

	stop      chan struct{}
	done      chan struct{}
	startOnce sync.Once
	closeOnce sync.Once
}

// NewWebhooks returns the consumer; Start runs it.
func NewWebhooks(q chat.EventQueue, hooks []Webhook, opts WebhookOptions, m *Metrics, log *slog.Logger) *Webhooks {
	opts.setDefaults()
	w := &Webhooks{
		q: q, hooks: hooks, opts: opts, metrics: m, log: log,
		client: &http.Client{
			// A receiver that redirects is misconfigured; following it
			// would send the signed body somewhere nobody configured.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for _, h := range hooks {
		var set map[string]bool
		if len(h.Events) > 0 {
			set = make(map[string]bool, len(h.Events))
			for _, e := range h.Events {
				set[e] = true
			}
		}
		w.wants = append(w.wants, set)
	}
	return w
}

// Start runs the consumer in the background. Without webhooks nothing
// consumes the queue: events expire there.
func (w *Webhooks) Start() {
	w.startOnce.Do(func() {
		if len(w.hooks) == 0 {
			close(w.done)
			return
		}
		go w.run()
	})
}

// Close stops the consumer: it finishes the batch in hand, gives what is
// still queued one attempt, and returns.
func (w *Webhooks) Close() {
	w.closeOnce.Do(func() { close(w.stop) })
	w.Start() // so that done closes when never started
	<-w.done
}

func (w *Webhooks) run() {
	defer close(w.done)
	idle := time.NewTimer(0)
	defer idle.Stop()
	for {
		select {
		case <-w.stop:
			w.drain()
			return
		case <-idle.C:
		}
		if n := w.pass(w.opts.Attempts); n > 0 {
			idle.Reset(0) // more may be waiting
		} else {
			idle.Reset(w.opts.PollInterval)
		}
	}
}

// drain delivers what is left, one attempt each, within a bound so that a
// dead receiver does not hold up shutdown for long.
func (w *Webhooks) drain() {
	for i := 0; i < 10 && w.pass(1) > 0; i++ {
	}
}

// pass takes one batch and delivers it; it returns how many events it took.
func (w *Webhooks) pass(attempts int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	batch, err := w.q.Take(ctx, chat.EventsKey, w.opts.BatchSize)
	cancel()
	if err != nil {
		w.log.Warn("webhooks: taking events", "err", err)
		return 0
	}
	if len(batch) == 0 {
		return 0
	}
	types := make([]string, len(batch))
	for i, p := range batch {
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(p, &head)
		types[i] = head.Type
	}
	var wg sync.WaitGroup
	for i := range w.hooks {
		var sel [][]byte
		for j, p := range batch {
			if w.wants[i] == nil || w.wants[i][types[j]] {
				sel = append(sel, p)
			}
		}
		if len(sel) == 0 {
			continue
		}
		body := make([]byte, 0, 2+len(sel)*128)
		body = append(body, '[')
		body = append(body, bytes.Join(sel, []byte{','})...)
		body = append(body, ']')
		wg.Add(1)
		go func(h *Webhook, n int) {
			defer wg.Done()
			w.deliver(h, body, n, attempts)
		}(&w.hooks[i], len(sel))
	}
	wg.Wait()
	return len(batch)
}

// deliver POSTs body until it is accepted, a permanent error, or attempts
// run out; then the events are dropped and counted.
func (w *Webhooks) deliver(h *Webhook, body []byte, events, attempts int) {
	id := chat.NewID() // the same on every attempt: receivers can dedupe
	backoff := w.opts.Backoff
	for attempt := 1; ; attempt++ {
		err := w.post(h, body, id)
		if err == nil {
			w.metrics.WebhookDeliveries.Inc()
			return
		}
		w.metrics.WebhookFailures.Inc()
		var perm permanentError
		if attempt >= attempts || errors.As(err, &perm) {
			w.metrics.WebhookDropped.Add(float64(events))
			w.log.Warn("webhook: dropping events", "url", redactURL(h.URL), "events", events, "attempts", attempt, "err", err)
			return
		}
		select {
		case <-time.After(backoff):
		case <-w.stop:
			w.metrics.WebhookDropped.Add(float64(events))
			w.log.Warn("webhook: dropping events at shutdown", "url", redactURL(h.URL), "events", events, "err", err)
			return
		}
		backoff *= 2
	}
}

// permanentError is a failure a retry will not change: a 4xx answer other
// than 408 and 429, or a request that cannot be made.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }

func (w *Webhooks) post(h *Webhook, body []byte, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return permanentError{err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", w.opts.UserAgent)
	req.Header.Set("X-Imserver-Delivery", id)
	if h.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(h.Secret, body))
	}
	res, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return nil
	case res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusRequestTimeout && res.StatusCode != http.StatusTooManyRequests:
		return permanentError{fmt.Errorf("status %d", res.StatusCode)}
	default:
		return fmt.Errorf("status %d", res.StatusCode)
	}
}

// Sign returns the signature header's value for body: "sha256=" and the
// hex HMAC-SHA256 of body keyed with secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// redactURL keeps a webhook URL's scheme, host and path for logs: queries
// and user info often carry credentials.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
