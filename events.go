package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/seq"
	"github.com/imserver/imserver/server"
)

// stormWindow returns the window that counts group messages for storm
// mode: exact in process, kept to threshold+1 timestamps per group.
//
// With Redis configured it is to be the shared sorted-set window behind a
// fallback to this in-process one, so that a dead Redis degrades detection
// to per-process counts instead of failing sends:
//
//	seq.NewFallbackWindow(
//		seq.NewRedisWindow(rdb, cfg.Storm.KeyPrefix, cfg.Storm.Window, cfg.Storm.Threshold+1, cfg.Storm.KeyTTL),
//		local, func(err error) { log.Warn(...); metrics.WindowFallback(err) })
func stormWindow(cfg Config, log *slog.Logger, metrics *server.Metrics) (chat.StormWindow, error) {
	if cfg.Storm.Threshold <= 0 {
		return nil, nil // storm mode off
	}
	local := seq.NewLocalWindow(cfg.Storm.Window, cfg.Storm.Threshold+1)
	if cfg.Redis != "" {
		return nil, errors.New("storm window: redis is not wired yet")
	}
	return local, nil
}

// eventQueue returns the bounded queue of outbound events: in process; with
// Redis it is to be seq.NewRedisQueue(rdb, cfg.Storm.KeyPrefix,
// cfg.Events.Capacity, cfg.Events.TTL), so that the processes sharing it
// share the webhook deliveries.
func eventQueue(cfg Config) (chat.EventQueue, error) {
	if cfg.Redis != "" {
		return nil, errors.New("event queue: redis is not wired yet")
	}
	return seq.NewLocalQueue(cfg.Events.Capacity, cfg.Events.TTL), nil
}

func webhooks(cfg Config) []server.Webhook {
	out := make([]server.Webhook, 0, len(cfg.Webhooks))
	for _, w := range cfg.Webhooks {
		out = append(out, server.Webhook{URL: w.URL, Events: w.Events, Secret: w.Secret})
	}
	return out
}

// eventTypes are the types a webhook may ask for.
var eventTypes = map[string]bool{chat.AlertStormStarted: true, chat.AlertStormEnded: true}

func validateWebhooks(hooks []WebhookConfig) error {
	for i, w := range hooks {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("webhooks[%d].url must be an http(s) URL, not %q", i, w.URL)
		}
		for _, e := range w.Events {
			if !eventTypes[e] {
				return fmt.Errorf("webhooks[%d].events: unknown event type %q", i, e)
			}
		}
	}
	return nil
}
