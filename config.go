package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is imserver's configuration file; config.example.yaml documents
// every key with its default.
type Config struct {
	Addr  string `yaml:"addr"`
	DB    string `yaml:"db"`
	Redis string `yaml:"redis"`
	// RedisPrefix prefixes every Redis key and the bus channel.
	RedisPrefix string `yaml:"redis_prefix"`
	Seq         struct {
		GroupBlock  int64 `yaml:"group_block"`
		DirectBlock int64 `yaml:"direct_block"`
	} `yaml:"seq"`
	Auth struct {
		Registration string   `yaml:"registration"`
		Admins       []string `yaml:"admins"`
	} `yaml:"auth"`
	Storm struct {
		Window        time.Duration `yaml:"window"`
		Threshold     int           `yaml:"threshold"`
		LowerMark     int           `yaml:"lower_mark"`
		FlushInterval time.Duration `yaml:"flush_interval"`
		KeyTTL        time.Duration `yaml:"key_ttl"`
		KeyPrefix     string        `yaml:"key_prefix"`
	} `yaml:"storm"`
	Limits struct {
		MaxBodyBytes    int     `yaml:"max_body_bytes"`
		MaxRequestBytes int64   `yaml:"max_request_bytes"`
		MaxFrameBytes   int64   `yaml:"max_frame_bytes"`
		SendRate        float64 `yaml:"send_rate"`
		SendBurst       int     `yaml:"send_burst"`
	} `yaml:"limits"`
	SQLite struct {
		Synchronous string        `yaml:"synchronous"`
		BatchSize   int           `yaml:"batch_size"`
		BatchDelay  time.Duration `yaml:"batch_delay"`
		Readers     int           `yaml:"readers"`
	} `yaml:"sqlite"`
	// Retention.Days > 0 deletes messages older than that many days.
	Retention struct {
		Days int `yaml:"days"`
	} `yaml:"retention"`
	WebSocket struct {
		AllowedOrigins []string      `yaml:"allowed_origins"`
		SessionQueue   int           `yaml:"session_queue"`
		WriteTimeout   time.Duration `yaml:"write_timeout"`
		PresenceGrace  time.Duration `yaml:"presence_grace"`
	} `yaml:"websocket"`
	Chat struct {
		AckFlushInterval time.Duration `yaml:"ack_flush_interval"`
		ReceiptInterval  time.Duration `yaml:"receipt_interval"`
	} `yaml:"chat"`
	Log struct {
		Level  string `yaml:"level"`
		Format string `yaml:"format"`
	} `yaml:"log"`
	Events struct {
		Capacity        int           `yaml:"capacity"`
		TTL             time.Duration `yaml:"ttl"`
		BatchSize       int           `yaml:"batch_size"`
		PollInterval    time.Duration `yaml:"poll_interval"`
		WebhookTimeout  time.Duration `yaml:"webhook_timeout"`
		WebhookAttempts int           `yaml:"webhook_attempts"`
	} `yaml:"events"`
	Webhooks []WebhookConfig `yaml:"webhooks"`
	Debug    struct {
		Pprof bool `yaml:"pprof"`
	} `yaml:"debug"`
}

// WebhookConfig is one outgoing webhook.
type WebhookConfig struct {
	URL    string   `yaml:"url"`
	Events []string `yaml:"events"`
	Secret string   `yaml:"secret"`
}

// defaultConfig is what `imserver serve` runs with when given nothing.
func defaultConfig() Config {
	var c Config
	c.Addr = "127.0.0.1:8080"
	c.DB = "imserver.db"
	c.RedisPrefix = "imserver:"
	c.Seq.GroupBlock = 100
	c.Seq.DirectBlock = 50
	c.Auth.Registration = "open"
	c.Storm.Window = 60 * time.Second
	c.Storm.Threshold = 100
	c.Storm.LowerMark = 50
	c.Storm.FlushInterval = 300 * time.Millisecond
	c.Storm.KeyTTL = 10 * time.Minute
	c.Storm.KeyPrefix = "imserver:"
	c.Limits.MaxBodyBytes = 16384
	c.Limits.MaxRequestBytes = 65536
	c.Limits.MaxFrameBytes = 65536
	c.Limits.SendRate = 50
	c.Limits.SendBurst = 200
	c.SQLite.Synchronous = "FULL"
	c.SQLite.BatchSize = 1000
	c.WebSocket.SessionQueue = 512
	c.WebSocket.WriteTimeout = 10 * time.Second
	c.WebSocket.PresenceGrace = 5 * time.Second
	c.Chat.AckFlushInterval = 200 * time.Millisecond
	c.Chat.ReceiptInterval = time.Second
	c.Log.Level = "info"
	c.Log.Format = "text"
	c.Events.Capacity = 1000
	c.Events.TTL = 10 * time.Minute
	c.Events.BatchSize = 100
	c.Events.PollInterval = 250 * time.Millisecond
	c.Events.WebhookTimeout = 5 * time.Second
	c.Events.WebhookAttempts = 3
	return c
}

// loadConfig is loadConfigFrom with the process's environment and no flags.
func loadConfig(path string) (Config, error) {
	return loadConfigFrom(path, os.Environ(), nil)
}

// loadConfigFrom builds the configuration; each layer overrides the one
// before: defaults, the file (path, or $IMSERVER_CONFIG when path is empty),
// the environment (config_env.go), then flags (key -> value). Unknown keys
// are errors, so a typo does not silently fall back to a default. Keys no
// layer set may then follow the ones that were (deriveDefaults).
func loadConfigFrom(path string, env []string, flags map[string]string) (Config, error) {
	c := defaultConfig()
	set := map[string]bool{}
	if path == "" {
		for _, kv := range env {
			if name, value, _ := strings.Cut(kv, "="); name == envConfigFile {
				path = value
			}
		}
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
		yamlKeys(&doc, "", set)
	}
	if err := applyEnv(&c, env, set); err != nil {
		return c, err
	}
	for key, value := range flags {
		if err := setKey(&c, key, value); err != nil {
			return c, err
		}
		set[key] = true
	}
	c.deriveDefaults(set)
	return c, c.validate()
}

// frameOverhead is room for a send frame's or request's fields around its
// body; a limit below max_body_bytes + this can never carry a full body.
const frameOverhead = 1024

// deriveDefaults makes the keys nobody set follow the ones that were set, so
// changing one key does not make its unchanged neighbour invalid.
func (c *Config) deriveDefaults(set map[string]bool) {
	if !set["storm.lower_mark"] {
		c.Storm.LowerMark = max(1, c.Storm.Threshold/2)
	}
	// A raised body limit raises the frame and request limits with it (twice
	// the body: JSON escaping of quotes and newlines doubles them); limits
	// lowered below the default body lower the body limit to fit.
	body := int64(c.Limits.MaxBodyBytes)
	for _, k := range []struct {
		key   string
		limit *int64
	}{{"limits.max_frame_bytes", &c.Limits.MaxFrameBytes}, {"limits.max_request_bytes", &c.Limits.MaxRequestBytes}} {
		switch {
		case !set[k.key] && set["limits.max_body_bytes"]:
			*k.limit = max(*k.limit, 2*body+4*frameOverhead)
		case set[k.key] && !set["limits.max_body_bytes"] && *k.limit < body+frameOverhead:
			c.Limits.MaxBodyBytes = max(1, int(*k.limit-frameOverhead))
		}
	}
}

func (c *Config) validate() error {
	switch c.Auth.Registration {
	case "open", "closed":
	default:
		return fmt.Errorf("auth.registration must be open or closed, not %q", c.Auth.Registration)
	}
	if c.Storm.Threshold < 0 {
		return fmt.Errorf("storm.threshold must be >= 0 (0 turns storm mode off), not %d", c.Storm.Threshold)
	}
	if c.Storm.Threshold == 1 {
		return fmt.Errorf("storm.threshold must be 0 (off) or at least 2, not 1 (the storm ends below storm.lower_mark, which is at least 1)")
	}
	if c.Storm.Threshold > 0 {
		if c.Storm.LowerMark >= c.Storm.Threshold {
			return fmt.Errorf("storm.lower_mark (%d) must be below storm.threshold (%d); leave lower_mark unset to follow the threshold (half of it)", c.Storm.LowerMark, c.Storm.Threshold)
		}
		if c.Storm.LowerMark < 1 {
			return fmt.Errorf("storm.lower_mark must be >= 1, not %d", c.Storm.LowerMark)
		}
		if c.Storm.Window <= 0 || c.Storm.FlushInterval <= 0 {
			return fmt.Errorf("storm.window and storm.flush_interval must be positive")
		}
	}
	if c.WebSocket.PresenceGrace <= 0 || c.WebSocket.PresenceGrace > 5*time.Second {
		return fmt.Errorf("websocket.presence_grace must be above 0 and at most 5s, not %s", c.WebSocket.PresenceGrace)
	}
	if c.Limits.MaxBodyBytes < 1 {
		return fmt.Errorf("limits.max_body_bytes must be >= 1, not %d", c.Limits.MaxBodyBytes)
	}
	for _, l := range []struct {
		key   string
		limit int64
	}{{"limits.max_frame_bytes", c.Limits.MaxFrameBytes}, {"limits.max_request_bytes", c.Limits.MaxRequestBytes}} {
		if l.limit < int64(c.Limits.MaxBodyBytes)+frameOverhead {
			return fmt.Errorf("%s (%d) leaves no room for a message of limits.max_body_bytes (%d): it must be at least max_body_bytes + %d; raise it or leave it unset to follow max_body_bytes", l.key, l.limit, c.Limits.MaxBodyBytes, frameOverhead)
		}
	}
	if c.Retention.Days < 0 {
		return fmt.Errorf("retention.days must be >= 0 (0 keeps messages forever), not %d", c.Retention.Days)
	}
	if c.Events.Capacity < 1 {
		return fmt.Errorf("events.capacity must be >= 1, not %d", c.Events.Capacity)
	}
	return validateWebhooks(c.Webhooks)
}
