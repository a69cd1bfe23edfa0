package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/seq"
	"github.com/imserver/imserver/server"
	"github.com/redis/go-redis/v9"
)

// stormExchange is how often a node sends the storm-window events it
// counted to Redis and reads back every process's counts.
const stormExchange = 50 * time.Millisecond

// stormWindow returns the window that counts group messages for storm
// mode: exact in process, kept to threshold+1 timestamps per group. With
// Redis it is shared: each node counts its own messages at once and
// exchanges counts with the others through Redis every stormExchange
// (seq.SharedWindow), instead of a script call per send; while Redis fails
// it counts this node's messages only, so that a dead Redis degrades
// detection to per-process counts instead of failing sends.
func stormWindow(cfg Config, rdb redis.UniversalClient, log *slog.Logger, metrics *server.Metrics) chat.StormWindow {
	if cfg.Storm.Threshold <= 0 {
		return nil // storm mode off
	}
	if rdb == nil {
		return seq.NewLocalWindow(cfg.Storm.Window, cfg.Storm.Threshold+1)
	}
	shared := seq.NewRedisWindow(rdb, cfg.Storm.KeyPrefix, cfg.Storm.Window, cfg.Storm.Threshold+1, cfg.Storm.KeyTTL)
	return seq.NewSharedWindow(shared, stormExchange, func(err error) {
		log.Warn("storm window: Redis failed, counting in this process", "err", err)
		metrics.WindowFallback(err)
	})
}

// eventQueue returns the bounded queue of outbound events: in process, or
// in Redis so that the processes sharing it share the webhook deliveries.
func eventQueue(cfg Config, rdb redis.UniversalClient) chat.EventQueue {
	if rdb != nil {
		return seq.NewRedisQueue(rdb, cfg.RedisPrefix, cfg.Events.Capacity, cfg.Events.TTL)
	}
	return seq.NewLocalQueue(cfg.Events.Capacity, cfg.Events.TTL)
}

// redisClient connects to cfg.Redis with short timeouts: a dead Redis must
// turn sends into fast `unavailable` answers, not hangs.
func redisClient(cfg Config) (redis.UniversalClient, error) {
	if cfg.Redis == "" {
		return nil, nil
	}
	opts, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = 500 * time.Millisecond
	opts.ReadTimeout = 500 * time.Millisecond
	opts.WriteTimeout = 500 * time.Millisecond
	opts.PoolTimeout = time.Second
	opts.MaxRetries = 1
	opts.DialerRetries = 1
	return redis.NewClient(opts), nil
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
