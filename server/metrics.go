package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the server's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry

	Sessions      prometheus.Gauge
	Stored        prometheus.Counter
	Deliveries    prometheus.Counter
	Frames        prometheus.Counter
	Bytes         prometheus.Counter
	SlowCuts      prometheus.Counter
	RateLimited   prometheus.Counter
	BatchJobs     prometheus.Histogram
	CommitSeconds prometheus.Histogram
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
		BatchJobs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_writer_batch_jobs", Help: "Jobs per write transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "imserver_writer_commit_seconds", Help: "Write transaction latency.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
	}
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Sessions, m.Stored, m.Deliveries, m.Frames, m.Bytes, m.SlowCuts, m.RateLimited, m.BatchJobs, m.CommitSeconds)
	return m
}

// Batch implements storage.WriterMetrics.
func (m *Metrics) Batch(jobs, messages int, commit time.Duration) {
	m.BatchJobs.Observe(float64(jobs))
	m.CommitSeconds.Observe(commit.Seconds())
	m.Stored.Add(float64(messages))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
