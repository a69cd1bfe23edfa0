// Command imserver is a self-hosted chat server for small teams.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/imserver/imserver/bench"
	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/server"
	"github.com/imserver/imserver/web"
	"github.com/spf13/cobra"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "imserver",
		Short:         "A self-hosted chat server for small teams",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(serveCommand(), userCommand(), inviteCommand(), versionCommand(), healthcheckCommand(), backupCommand(), restoreCommand(), populateCommand(), vacuumCommand(), migrateToPostgresCommand(), bench.Command())
	return root
}

func serveCommand() *cobra.Command {
	var configPath, addr, db, redisURL string
	cmd := &cobra.Command{
		Use:          "serve",
		Short:        "Run the chat server",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFrom(configPath, os.Environ(), changedFlags(cmd, map[string]string{"addr": addr, "db": db, "redis": redisURL}))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, cfg, cmd)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file (default $IMSERVER_CONFIG)")
	cmd.Flags().StringVar(&addr, "addr", "", "listen address (default 127.0.0.1:8080)")
	cmd.Flags().StringVar(&db, "db", "", "SQLite database file or postgres://user:pass@host/db (default imserver.db; env IMSERVER_DB)")
	cmd.Flags().StringVar(&redisURL, "redis", "", "redis://host:port/db; empty runs in process only")
	return cmd
}

// changedFlags keeps the flags (named after their config keys) the command
// line gave, which override the environment and the file.
func changedFlags(cmd *cobra.Command, flags map[string]string) map[string]string {
	for name := range flags {
		if !cmd.Flags().Changed(name) {
			delete(flags, name)
		}
	}
	return flags
}

func newLogger(cfg Config) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Log.Level)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(cfg.Log.Format, "json") {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// serve wires the adapters around the domain and runs until ctx ends.
func serve(ctx context.Context, cfg Config, cmd *cobra.Command) error {
	log := newLogger(cfg)
	rdb, err := redisClient(cfg)
	if err != nil {
		return err
	}
	metrics := server.NewMetrics()
	hub := server.NewHub(log, metrics)
	health := map[string]server.Pinger{}
	var deliver chat.Deliverer = hub
	var bus *server.Bus
	if rdb != nil {
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			// Stay up: sends answer `unavailable` until Redis answers.
			log.Warn("redis does not answer; starting degraded", "err", err)
		}
		health["redis"] = func(ctx context.Context) error {
			if err := rdb.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%w: %w", chat.Errorf(chat.EUnavailable, "redis does not answer"), err)
			}
			return nil
		}
		bus = server.NewBus(rdb, cfg.RedisPrefix+"bus", hub, metrics, log)
		defer bus.Close()
		deliver = bus
	}
	window := stormWindow(cfg, rdb, log, metrics)
	if c, ok := window.(interface{ Close() }); ok {
		defer c.Close() // its last exchange, before Redis closes
	}
	events := eventQueue(cfg, rdb)
	metrics.WatchEventQueue(events)
	var svc *chat.Service
	if !isPostgres(cfg.DB) {
		release, err := lockDatabase(cfg.DB, rdb != nil)
		if err != nil {
			return err
		}
		defer release()
	}
	db, dbName, err := openStore(ctx, cfg, storeOptions{
		onCommit: func(m []chat.Message) { svc.Committed(m) },
		// SQLite: fan-out and the answers to WebSocket sends run
		// together, off the writer's goroutine.
		onBatch: func(m []chat.Message, answer func()) { svc.CommittedThen(m, answer) },
		metrics: metrics,
		redis:   rdb,
		log:     log,
	})
	if err != nil {
		return err
	}
	ccfg := chatConfig(cfg)
	ccfg.Storm.Counter, ccfg.Events, ccfg.Observer = window, events, metrics
	push := pushSender(cfg, metrics, log)
	if push != nil {
		ccfg.Push = chat.PushConfig{Sender: push, Delay: cfg.Push.Delay, Preview: cfg.Push.Preview}
	}
	if bus != nil {
		ccfg.Peers = bus
	}
	svc = chat.NewService(db, deliver, ccfg, log)
	if bus != nil {
		bus.Attach(svc)
	}
	health[dbName] = db.Ping
	schema, err := db.SchemaVersion(ctx)
	if err != nil {
		svc.Close()
		db.Close()
		return err
	}
	fileSvc, err := openFiles(ctx, cfg, db, dbName, metrics, log)
	if err != nil {
		svc.Close()
		db.Close()
		return err
	}
	build := readBuildInfo()
	stopAll := func() {
		svc.Close()
		if push != nil {
			push.Close()
		}
		fileSvc.Close()
		db.Close()
	}
	if push != nil {
		if err := push.Start(ctx, svc); err != nil {
			stopAll()
			return err
		}
	}
	proxies, _ := server.ParseTrustedProxies(cfg.HTTP.TrustedProxies) // checked by validate
	tlsc, err := setupTLS(cfg.TLS, cfg.Addr, log)
	if err != nil {
		stopAll()
		return err
	}
	scfg := serverConfig(cfg, build, schema)
	scfg.TrustedProxies, scfg.HSTS, scfg.Files, scfg.Push = proxies, tlsc != nil, fileSvc, push
	srv := server.New(scfg, svc, hub, metrics, web.Handler(), health, log)
	if rdb != nil {
		srv.ShareOnline(rdb, cfg.RedisPrefix)
	}

	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		stopAll()
		return err
	}
	scheme := "http"
	if tlsc != nil {
		scheme = "https"
		l = tls.NewListener(l, tlsc.config)
		if cfg.TLS.HTTPAddr != "" {
			stopPlain, err := servePlain(ctx, cfg.TLS.HTTPAddr, tlsc.plain, log)
			if err != nil {
				l.Close()
				stopAll()
				return err
			}
			defer stopPlain()
		}
	}
	// Opening left garbage that nothing will reuse soon: the saved dedup
	// filter's copies (tens of MB at 10M messages), the password hasher's
	// warm-up. Give it back to the OS now rather than over minutes of the
	// scavenger, so that an idle server's RSS is what it holds.
	debug.FreeOSMemory()
	fmt.Fprintf(cmd.OutOrStdout(), "imserver %s listening on %s://%s (database %s, schema %d)\n", build.Version, scheme, l.Addr(), displayDB(cfg.DB), schema)
	hooks := server.NewWebhooks(events, webhooks(cfg), server.WebhookOptions{
		Timeout:      cfg.Events.WebhookTimeout,
		Attempts:     cfg.Events.WebhookAttempts,
		BatchSize:    cfg.Events.BatchSize,
		PollInterval: cfg.Events.PollInterval,
		UserAgent:    "imserver/" + build.Version,
	}, metrics, log)
	hooks.Start()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("shutting down")
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Order matters: stop taking work, then flush acks and receipts, then
	// let the writer commit what is queued.
	err = errors.Join(err, srv.Shutdown(shutdownCtx))
	svc.Close()
	if push != nil {
		push.Close()
	}
	hooks.Close()
	fileSvc.Close()
	err = errors.Join(err, db.Close())
	return err
}

// serverConfig maps the configuration onto the server's; serve adds what
// it builds (files, push, TLS, proxies).
func serverConfig(cfg Config, build buildInfo, schema int) server.Config {
	return server.Config{
		MaxRequestBytes:    cfg.Limits.MaxRequestBytes,
		MaxFrameBytes:      cfg.Limits.MaxFrameBytes,
		AllowedOrigins:     cfg.WebSocket.AllowedOrigins,
		SessionQueue:       cfg.WebSocket.SessionQueue,
		WriteTimeout:       cfg.WebSocket.WriteTimeout,
		WriteDelay:         cfg.WebSocket.WriteDelay,
		PresenceGrace:      cfg.WebSocket.PresenceGrace,
		Pprof:              cfg.Debug.Pprof,
		MetricsToken:       cfg.Metrics.Token,
		ReadTimeout:        cfg.HTTP.ReadTimeout,
		APIWriteTimeout:    cfg.HTTP.WriteTimeout,
		MaxSessionsPerUser: cfg.WebSocket.MaxSessionsPerUser,
		Version:            build.Version,
		Commit:             build.Commit,
		Schema:             schema,
		LoginFailures:      cfg.Limits.LoginFailures,
		RegisterPerHour:    cfg.Limits.RegisterPerHour,
		PublicURL:          cfg.HTTP.PublicURL,
		PushAllowPrivate:   cfg.Push.AllowPrivate,
	}
}

// pushSender returns the Web Push sender, nil when push is off.
func pushSender(cfg Config, metrics *server.Metrics, log *slog.Logger) *server.PushSender {
	if !cfg.Push.Enabled {
		return nil
	}
	return server.NewPushSender(server.PushOptions{
		Subscriber:   pushSubscriber(cfg),
		AllowPrivate: cfg.Push.AllowPrivate,
		Timeout:      cfg.Push.Timeout,
		QueueSize:    cfg.Push.Queue,
		Attempts:     cfg.Push.Attempts,
	}, metrics, log)
}

// openFiles starts the file service: metadata in the store, bytes in
// files.dir. On PostgreSQL there is no database file to put them beside,
// and every node must use the same directory (docs/scaling.md): without
// files.dir the file routes are off (uploads answer 404), as they are on
// a store without files. A nil *server.Files is "off".
func openFiles(ctx context.Context, cfg Config, db chat.Store, dbName string, metrics *server.Metrics, log *slog.Logger) (*server.Files, error) {
	fdb, ok := db.(server.FileDB)
	if !ok {
		return nil, nil
	}
	if isPostgres(cfg.DB) && cfg.Files.Dir == "" {
		log.Warn("files are off: on PostgreSQL set files.dir to a directory every node shares", "db", dbName)
		return nil, nil
	}
	return server.OpenFiles(ctx, fdb, server.FilesOptions{
		Dir:            cfg.filesDir(),
		MaxFileBytes:   cfg.Limits.MaxFileBytes,
		MaxTotalBytes:  cfg.Files.MaxTotalBytes,
		OrphanTTL:      cfg.Files.OrphanTTL,
		SweepInterval:  cfg.Files.SweepInterval,
		MaxImagePixels: cfg.Files.MaxImagePixels,
		ThumbWorkers:   cfg.Files.ThumbWorkers,
	}, metrics, log)
}

func chatConfig(cfg Config) chat.Config {
	return chat.Config{
		MaxBodyBytes:     cfg.Limits.MaxBodyBytes,
		SendRate:         cfg.Limits.SendRate,
		SendBurst:        cfg.Limits.SendBurst,
		RegistrationOpen: cfg.Auth.Registration == "open",
		Registration:     cfg.Auth.Registration,
		AckFlushInterval: cfg.Chat.AckFlushInterval,
		ReceiptInterval:  cfg.Chat.ReceiptInterval,
		Admins:           cfg.Auth.Admins,
		TokenIdle:        cfg.Auth.TokenIdle,
		TokenMaxAge:      cfg.Auth.TokenMaxAge,
		Storm: chat.StormConfig{
			Threshold:     cfg.Storm.Threshold,
			LowerMark:     cfg.Storm.LowerMark,
			Window:        cfg.Storm.Window,
			FlushInterval: cfg.Storm.FlushInterval,
		},
	}
}
