package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// validate checks the TLS keys before anything starts, so a typo is a
// clear error at start, not a handshake failure later.
func (t *TLSConfig) validate() error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.New("tls.cert_file and tls.key_file go together: set both or neither")
	}
	if t.CertFile != "" && len(t.ACME.Domains) > 0 {
		return errors.New("tls: use either cert_file/key_file or acme, not both")
	}
	if t.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return fmt.Errorf("tls.cert_file %s / tls.key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
	}
	for _, d := range t.ACME.Domains {
		if d == "" || strings.ContainsAny(d, "/: ") {
			return fmt.Errorf("tls.acme.domains: %q is not a host name", d)
		}
	}
	if len(t.ACME.Domains) > 0 && t.ACME.CacheDir == "" {
		return errors.New("tls.acme.cache_dir is required: certificates and the account key are kept there")
	}
	return nil
}

// tlsServing is what serve needs to serve HTTPS: the listener's TLS
// config, and the handler of the plain-HTTP port (ACME HTTP-01 challenges
// and a redirect to HTTPS).
type tlsServing struct {
	config *tls.Config
	plain  http.Handler
}

// setupTLS prepares HTTPS per cfg; nil when TLS is off.
func setupTLS(cfg TLSConfig, addr string, log *slog.Logger) (*tlsServing, error) {
	_, port, _ := net.SplitHostPort(addr)
	if !cfg.enabled() {
		return nil, nil
	}
	if cfg.CertFile != "" {
		// Loaded per handshake from a cache refreshed when the files
		// change, so a renewed certificate is picked up without a
		// restart.
		kp := &keyPair{cert: cfg.CertFile, key: cfg.KeyFile, log: log}
		if err := kp.reload(); err != nil {
			return nil, err
		}
		return &tlsServing{
			config: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get, NextProtos: []string{"h2", "http/1.1"}},
			plain:  redirectHTTPS(port),
		}, nil
	}
	if err := os.MkdirAll(cfg.ACME.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("tls.acme.cache_dir: %w", err)
	}
	m := &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		Cache:      autocert.DirCache(cfg.ACME.CacheDir),
		HostPolicy: autocert.HostWhitelist(cfg.ACME.Domains...),
		Email:      cfg.ACME.Email,
	}
	if cfg.ACME.DirectoryURL != "" || cfg.ACME.CAFile != "" {
		m.Client = &acme.Client{DirectoryURL: cfg.ACME.DirectoryURL}
	}
	if cfg.ACME.CAFile != "" {
		pem, err := os.ReadFile(cfg.ACME.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.acme.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.acme.ca_file %s: no PEM certificate in it", cfg.ACME.CAFile)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		m.Client.HTTPClient = &http.Client{Transport: tr, Timeout: time.Minute}
	}
	tc := m.TLSConfig() // answers TLS-ALPN-01 (acme-tls/1) itself
	tc.MinVersion = tls.VersionTLS12
	return &tlsServing{config: tc, plain: m.HTTPHandler(redirectHTTPS(port))}, nil
}

// redirectHTTPS sends plain-HTTP visitors to the same URL over HTTPS, on
// port (the HTTPS listener's; left out when it is 443).
func redirectHTTPS(port string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			http.Error(w, "Use HTTPS", http.StatusBadRequest)
			return
		}
		if port != "" && port != "443" {
			host = net.JoinHostPort(host, port)
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusMovedPermanently)
	})
}

// keyPair serves a certificate from files, reloading them when they
// change on disk (checked at most every few seconds).
type keyPair struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	modTime time.Time
	checked time.Time
}

func (kp *keyPair) reload() error {
	c, err := tls.LoadX509KeyPair(kp.cert, kp.key)
	if err != nil {
		return fmt.Errorf("tls.cert_file %s / tls.key_file %s: %w", kp.cert, kp.key, err)
	}
	kp.current = &c
	if fi, err := os.Stat(kp.cert); err == nil {
		kp.modTime = fi.ModTime()
	}
	kp.checked = time.Now()
	return nil
}

func (kp *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if time.Since(kp.checked) > 5*time.Second {
		kp.checked = time.Now()
		if fi, err := os.Stat(kp.cert); err == nil && !fi.ModTime().Equal(kp.modTime) {
			old := kp.current
			if err := kp.reload(); err != nil {
				// Keep serving the old one; a half-written renewal must
				// not take the site down.
				kp.current = old
				kp.log.Warn("reloading the TLS certificate", "err", err)
			}
		}
	}
	return kp.current, nil
}

// servePlain runs the plain-HTTP port until ctx ends.
func servePlain(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tls.http_addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("plain HTTP port", "err", err)
		}
	}()
	return func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}, nil
}
