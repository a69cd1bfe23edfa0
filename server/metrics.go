package server

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the server's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry

	Sessions    prometheus.Gauge
	Stored      prometheus.Counter
	Deliveries  prometheus.Counter
	Frames      prometheus.Counter
	Bytes       prometheus.Counter
	SlowCuts    prometheus.Counter
	RateLimited prometheus.Counter
	// Hostile and failing conditions.
	WriteErrors     *prometheus.CounterVec
	SessionsRefused prometheus.Counter
	BatchJobs       prometheus.Histogram
	CommitSeconds   prometheus.Histogram

	// Storm mode and the outbound event queue.
	StormsStarted     prometheus.Counter
	StormGroups       prometheus.Gauge
	StormWindow       prometheus.Histogram
	StormBatchSizes   prometheus.Histogram
	WindowFallbacks   prometheus.Counter
	BusPublished      prometheus.Counter
	BusDropped        prometheus.Counter
	EventsPushed      prometheus.Counter
	EventsDropped     *prometheus.CounterVec
	WebhookDeliveries prometheus.Counter
	WebhookFailures   prometheus.Counter
	WebhookDropped    prometheus.Counter
}

// NewMetrics registers the metrics, with the Go and process collectors
// (process_resident_memory_bytes is what the bench reads per session).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry:    r,
		Sessions:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "imserver_sessions", Help: "Open WebSocket sessions."}),
		Stored:      prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_messages_stored_total", Help: "Messages durably stored."}),
		Deliveries:  prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_deliveries_total", Help: "Messages queued to sessions."}),
		Frames:      prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_frames_written_total", Help: "WebSocket frames written."}),
		Bytes:       prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_bytes_written_total", Help: "WebSocket payload bytes written."}),
		SlowCuts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_slow_reader_cuts_total", Help: "Live streams cut because a session's queue was full."}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_rate_limited_total", Help: "Sends refused by the rate limit."}),
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "imserver_storage_write_errors_total",
			Help: "Write transactions that failed because the database could not be written (full, readonly, io)."}, []string{"kind"}),
		SessionsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_sessions_refused_total",
			Help: "WebSocket upgrades refused because the user had websocket.max_sessions_per_user open on this process."}),
		BatchJobs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_writer_batch_jobs", Help: "Jobs per write transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_writer_commit_seconds", Help: "Write transaction latency.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),

		StormsStarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_storms_started_total", Help: "Groups that entered storm mode."}),
		StormGroups:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "imserver_storm_groups", Help: "Groups in storm mode now."}),
		StormWindow: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_storm_window_messages",
			Help:    "Messages in a group's storm window, observed at each group message (counted exactly up to threshold+1).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		StormBatchSizes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_storm_batch_messages",
			Help: "Messages per batch delivered to a storming group.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		WindowFallbacks:   prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_storm_window_fallbacks_total", Help: "Times the shared storm window failed and counting fell back to this process."}),
		BusPublished:      prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_bus_published_total", Help: "Events published to the other processes (Redis)."}),
		BusDropped:        prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_bus_dropped_total", Help: "Events not published to the other processes (queue full or Redis failing); their clients catch up by sync."}),
		EventsPushed:      prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_events_pushed_total", Help: "Outbound events put on the event queue."}),
		EventsDropped:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "imserver_events_dropped_total", Help: "Outbound events lost: pushed out of a full queue (full) or not pushed (error)."}, []string{"reason"}),
		WebhookDeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_webhook_deliveries_total", Help: "Webhook POSTs answered with 2xx."}),
		WebhookFailures:   prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_webhook_failures_total", Help: "Webhook POSTs that failed (each attempt)."}),
		WebhookDropped:    prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_webhook_dropped_events_total", Help: "Events a webhook never got: every attempt failed."}),
	}
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Sessions, m.Stored, m.Deliveries, m.Frames, m.Bytes, m.SlowCuts, m.RateLimited, m.BatchJobs, m.CommitSeconds,
		m.StormsStarted, m.StormGroups, m.StormWindow, m.StormBatchSizes, m.WindowFallbacks, m.EventsPushed, m.EventsDropped,
		m.WebhookDeliveries, m.WebhookFailures, m.WebhookDropped, m.BusPublished, m.BusDropped, m.WriteErrors, m.SessionsRefused)
	return m
}

var _ chat.Observer = (*Metrics)(nil)

// StormStarted implements chat.Observer.
func (m *Metrics) StormStarted(string, int) {
	m.StormsStarted.Inc()
	m.StormGroups.Inc()
}

// StormEnded implements chat.Observer.
func (m *Metrics) StormEnded(string, int, time.Duration) { m.StormGroups.Dec() }

// WindowCount implements chat.Observer.
func (m *Metrics) WindowCount(n int) { m.StormWindow.Observe(float64(n)) }

// StormBatch implements chat.Observer.
func (m *Metrics) StormBatch(n int) { m.StormBatchSizes.Observe(float64(n)) }

// EventPushed implements chat.Observer.
func (m *Metrics) EventPushed(dropped int, err error) {
	if err != nil {
		m.EventsDropped.WithLabelValues("error").Inc()
		return
	}
	m.EventsPushed.Inc()
	if dropped > 0 {
		m.EventsDropped.WithLabelValues("full").Add(float64(dropped))
	}
}

// WindowFallback counts a failover of the shared storm window; it fits
// the storm window's onFallback (seq.SharedWindow).
func (m *Metrics) WindowFallback(error) { m.WindowFallbacks.Inc() }

// WatchEventQueue exports the event queue's length, read at each scrape.
// Call it once.
func (m *Metrics) WatchEventQueue(q chat.EventQueue) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "imserver_event_queue_length", Help: "Outbound events waiting on the event queue.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n, err := q.Len(ctx, chat.EventsKey)
		if err != nil {
			return math.NaN()
		}
		return float64(n)
	}))
}

// Batch implements storage.WriterMetrics.
func (m *Metrics) Batch(jobs, messages int, commit time.Duration) {
	m.BatchJobs.Observe(float64(jobs))
	m.CommitSeconds.Observe(commit.Seconds())
	m.Stored.Add(float64(messages))
}

// WriteError implements storage.WriteErrorMetrics.
func (m *Metrics) WriteError(kind string) { m.WriteErrors.WithLabelValues(kind).Inc() }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
