package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/imserver/imserver/server"

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
		// TokenIdle ends a session unused this long; TokenMaxAge one this
		// old (0 = never).
		TokenIdle   time.Duration `yaml:"token_idle"`
		TokenMaxAge time.Duration `yaml:"token_max_age"`
	} `yaml:"auth"`
	HTTP struct {
		// ReadTimeout bounds an API request's body, WriteTimeout its
		// answer (per request: WebSockets keep their own deadlines).
		ReadTimeout  time.Duration `yaml:"read_timeout"`
		WriteTimeout time.Duration `yaml:"write_timeout"`
		// TrustedProxies are the reverse proxies whose X-Forwarded-For
		// names the client; PublicURL is how users reach the server.
		TrustedProxies []string `yaml:"trusted_proxies"`
		PublicURL      string   `yaml:"public_url"`
	} `yaml:"http"`
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
		RegisterPerHour int     `yaml:"register_per_hour"`
		LoginFailures   int     `yaml:"login_failures"`
		MaxFileBytes    int64   `yaml:"max_file_bytes"`
	} `yaml:"limits"`
	TLS   TLSConfig  `yaml:"tls"`
	Push  PushConfig `yaml:"push"`
	Files struct {
		Dir            string        `yaml:"dir"`
		MaxTotalBytes  int64         `yaml:"max_total_bytes"`
		OrphanTTL      time.Duration `yaml:"orphan_ttl"`
		SweepInterval  time.Duration `yaml:"sweep_interval"`
		MaxImagePixels int64         `yaml:"max_image_pixels"`
		ThumbWorkers   int           `yaml:"thumb_workers"`
	} `yaml:"files"`
	SQLite struct {
		Synchronous string        `yaml:"synchronous"`
		BatchSize   int           `yaml:"batch_size"`
		BatchDelay  time.Duration `yaml:"batch_delay"`
		Readers     int           `yaml:"readers"`
		// PipelinedSync: with FULL, the WAL is fsynced beside the writer
		// (the next batch runs meanwhile) instead of inside COMMIT.
		PipelinedSync bool `yaml:"pipelined_sync"`
		// SearchIndexBatch and SearchIndexPause pace the background
		// indexing of the messages stored before an upgrade: documents
		// per write transaction, and the writer's free time between two
		// (0: the store's defaults).
		SearchIndexBatch int           `yaml:"search_index_batch"`
		SearchIndexPause time.Duration `yaml:"search_index_pause"`
	} `yaml:"sqlite"`
	// Postgres tunes the PostgreSQL store, used when db is a postgres:// URL.
	Postgres struct {
		BatchSize    int           `yaml:"batch_size"`
		BatchDelay   time.Duration `yaml:"batch_delay"`
		MaxConns     int32         `yaml:"max_conns"`
		BatchTimeout time.Duration `yaml:"batch_timeout"`
	} `yaml:"postgres"`
	// Retention.Days > 0 deletes messages older than that many days
	// (at most maxRetentionDays).
	Retention struct {
		Days wholeDays `yaml:"days"`
	} `yaml:"retention"`
	WebSocket struct {
		AllowedOrigins []string      `yaml:"allowed_origins"`
		SessionQueue   int           `yaml:"session_queue"`
		WriteTimeout   time.Duration `yaml:"write_timeout"`
		// WriteDelay holds a session's writer this long once something is
		// queued, so that more frames leave in the same write.
		WriteDelay    time.Duration `yaml:"write_delay"`
		PresenceGrace time.Duration `yaml:"presence_grace"`
		// MaxSessionsPerUser bounds one user's open sockets per process.
		MaxSessionsPerUser int `yaml:"max_sessions_per_user"`
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
	// Metrics.Token lets a scraper read /metrics with it as a bearer
	// token (an admin's own token works too); without either, 401.
	Metrics struct {
		Token string `yaml:"token"`
	} `yaml:"metrics"`
	Debug struct {
		Pprof bool `yaml:"pprof"`
	} `yaml:"debug"`
}

// WebhookConfig is one outgoing webhook.
type WebhookConfig struct {
	URL    string   `yaml:"url"`
	Events []string `yaml:"events"`
	Secret string   `yaml:"secret"`
}

// TLSConfig serves HTTPS from certificate files or from certificates
// obtained with ACME (Let's Encrypt).
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// HTTPAddr serves ACME HTTP-01 challenges and redirects the rest to
	// HTTPS; empty for none.
	HTTPAddr string `yaml:"http_addr"`
	ACME     struct {
		Domains      []string `yaml:"domains"`
		Email        string   `yaml:"email"`
		CacheDir     string   `yaml:"cache_dir"`
		DirectoryURL string   `yaml:"directory_url"`
		// CAFile is a PEM file of the CAs that sign the ACME server's own
		// HTTPS certificate (a private ACME server, tests); empty trusts
		// the system's.
		CAFile string `yaml:"ca_file"`
	} `yaml:"acme"`
}

// enabled reports whether the server serves TLS.
func (t *TLSConfig) enabled() bool { return t.CertFile != "" || len(t.ACME.Domains) > 0 }

// PushConfig is Web Push.
type PushConfig struct {
	Enabled      bool          `yaml:"enabled"`
	Delay        time.Duration `yaml:"delay"`
	Preview      bool          `yaml:"preview"`
	AllowPrivate bool          `yaml:"allow_private"`
	Subscriber   string        `yaml:"subscriber"`
	Timeout      time.Duration `yaml:"timeout"`
	Queue        int           `yaml:"queue"`
	Attempts     int           `yaml:"attempts"`
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
	c.Auth.TokenIdle = 720 * time.Hour
	c.HTTP.ReadTimeout = 30 * time.Second
	c.HTTP.WriteTimeout = 30 * time.Second
	c.WebSocket.MaxSessionsPerUser = 32
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
	c.Limits.RegisterPerHour = 10
	c.Limits.LoginFailures = 10
	c.TLS.ACME.CacheDir = "acme-cache"
	c.Push.Enabled = true
	c.Push.Delay = 10 * time.Second
	c.Push.Preview = true
	c.Push.Timeout = 10 * time.Second
	c.Push.Queue = 1000
	c.Push.Attempts = 4
	c.Limits.MaxFileBytes = 25 << 20
	c.Files.OrphanTTL = 24 * time.Hour
	c.Files.SweepInterval = time.Hour
	c.Files.MaxImagePixels = 50_000_000
	c.Files.ThumbWorkers = 2
	c.SQLite.Synchronous = "FULL"
	c.SQLite.BatchSize = 1000
	c.Postgres.BatchSize = 1000
	c.Postgres.MaxConns = 16
	c.Postgres.BatchTimeout = 10 * time.Second
	c.WebSocket.SessionQueue = 512
	c.WebSocket.WriteTimeout = 10 * time.Second
	// The contract's "offline" comes within 5 s of the last close: 4 s
	// leaves room for delivering it.
	c.WebSocket.PresenceGrace = 4 * time.Second
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

// maxRetentionDays bounds retention.days: a hundred years.
const maxRetentionDays = 36500

// wholeDays is a count of days that must be written as a whole number:
// YAML would read 1.5 into an int as 1, and retention would delete half a
// day's more history than asked.
type wholeDays int

func (d *wholeDays) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return fmt.Errorf("line %d: %q is not a whole number of days", n.Line, n.Value)
	}
	var v int
	if err := n.Decode(&v); err != nil {
		return err
	}
	*d = wholeDays(v)
	return nil
}

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
	case "open", "invite", "closed":
	default:
		return fmt.Errorf("auth.registration must be open, invite or closed, not %q", c.Auth.Registration)
	}
	if c.Limits.RegisterPerHour < 0 || c.Limits.LoginFailures < 0 {
		return fmt.Errorf("limits.register_per_hour and limits.login_failures must be >= 0 (0 = no limit)")
	}
	if _, err := server.ParseTrustedProxies(c.HTTP.TrustedProxies); err != nil {
		return fmt.Errorf("http.trusted_proxies: %w", err)
	}
	if c.HTTP.PublicURL != "" {
		if u, err := url.Parse(c.HTTP.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("http.public_url must be an http(s) URL, not %q", c.HTTP.PublicURL)
		}
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	if c.Push.Enabled && (c.Push.Delay <= 0 || c.Push.Timeout <= 0 || c.Push.Queue < 1 || c.Push.Attempts < 1) {
		return fmt.Errorf("push.delay and push.timeout must be positive, push.queue and push.attempts >= 1")
	}
	if c.WebSocket.WriteDelay < 0 || c.WebSocket.WriteDelay > time.Second {
		return fmt.Errorf("websocket.write_delay must be between 0 (off) and 1s, not %s", c.WebSocket.WriteDelay)
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
	if c.Limits.MaxFileBytes < 1 {
		return fmt.Errorf("limits.max_file_bytes must be >= 1, not %d", c.Limits.MaxFileBytes)
	}
	if c.Files.MaxTotalBytes < 0 {
		return fmt.Errorf("files.max_total_bytes must be >= 0 (0 = no limit), not %d", c.Files.MaxTotalBytes)
	}
	if c.Files.OrphanTTL <= 0 || c.Files.SweepInterval <= 0 {
		return fmt.Errorf("files.orphan_ttl and files.sweep_interval must be positive")
	}
	if c.Files.MaxImagePixels < 1 || c.Files.ThumbWorkers < 1 {
		return fmt.Errorf("files.max_image_pixels and files.thumb_workers must be >= 1")
	}
	if err := negativeDurations(reflect.ValueOf(*c), ""); err != nil {
		return err
	}
	if c.WebSocket.MaxSessionsPerUser < 1 {
		return fmt.Errorf("websocket.max_sessions_per_user must be >= 1, not %d", c.WebSocket.MaxSessionsPerUser)
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
	if c.Postgres.BatchSize < 1 || c.Postgres.MaxConns < 2 || c.Postgres.BatchTimeout <= 0 {
		return fmt.Errorf("postgres: batch_size must be >= 1, max_conns >= 2 (the writer holds one) and batch_timeout positive")
	}
	// A value these settings cannot take would otherwise be replaced by a
	// default further down (the logger, the service), hiding the typo.
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		return fmt.Errorf("log.level must be debug, info, warn or error, not %q", c.Log.Level)
	}
	if f := strings.ToLower(c.Log.Format); f != "text" && f != "json" {
		return fmt.Errorf("log.format must be text or json, not %q", c.Log.Format)
	}
	if c.Limits.SendRate <= 0 || c.Limits.SendBurst < 1 {
		return fmt.Errorf("limits.send_rate must be above 0 and limits.send_burst at least 1 (not %g and %d): a user could not send", c.Limits.SendRate, c.Limits.SendBurst)
	}
	if c.SQLite.BatchSize < 0 || c.SQLite.Readers < 0 {
		return fmt.Errorf("sqlite.batch_size and sqlite.readers must be >= 0 (0 for the default), not %d and %d", c.SQLite.BatchSize, c.SQLite.Readers)
	}
	if c.SQLite.SearchIndexBatch < 0 {
		return fmt.Errorf("sqlite.search_index_batch must be >= 0 (0 for the default), not %d", c.SQLite.SearchIndexBatch)
	}
	// The days become a time.Duration, which a value past about 290
	// years wraps around to a recent cutoff: the history would be
	// deleted instead of kept.
	if c.Retention.Days < 0 || c.Retention.Days > maxRetentionDays {
		return fmt.Errorf("retention.days must be 0 (keep messages forever) to %d, not %d", maxRetentionDays, c.Retention.Days)
	}
	if c.Events.Capacity < 1 {
		return fmt.Errorf("events.capacity must be >= 1, not %d", c.Events.Capacity)
	}
	return validateWebhooks(c.Webhooks)
}

// filesDir is where uploads live: files.dir, or a folder beside the
// database named after it.
func (c *Config) filesDir() string {
	if c.Files.Dir != "" {
		return c.Files.Dir
	}
	return c.DB + "-files"
}

// negativeDurations finds a negative duration anywhere in the configuration
// and names its key: none of them means anything below zero, and a silent
// fallback to a default would hide the typo.
func negativeDurations(v reflect.Value, prefix string) error {
	if v.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		key := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if prefix != "" {
			key = prefix + "." + key
		}
		fv := v.Field(i)
		if d, ok := fv.Interface().(time.Duration); ok {
			if d < 0 {
				return fmt.Errorf("%s must not be negative, not %s", key, d)
			}
			continue
		}
		if err := negativeDurations(fv, key); err != nil {
			return err
		}
	}
	return nil
}
