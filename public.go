package main

import "strings"

// publicURL guesses the address users reach the server at.
func publicURL(cfg Config) string {
	if cfg.HTTP.PublicURL != "" {
		return cfg.HTTP.PublicURL
	}
	if len(cfg.TLS.ACME.Domains) > 0 {
		return "https://" + cfg.TLS.ACME.Domains[0]
	}
	scheme := "http"
	if cfg.TLS.enabled() {
		scheme = "https"
	}
	return scheme + "://" + strings.TrimPrefix(cfg.Addr, "0.0.0.0")
}

// pushSubscriber is the VAPID contact: push.subscriber, else the public
// https address (push services such as Apple's refuse a made-up one).
func pushSubscriber(cfg Config) string {
	if cfg.Push.Subscriber != "" {
		return cfg.Push.Subscriber
	}
	if u := publicURL(cfg); strings.HasPrefix(u, "https://") {
		return u
	}
	return ""
}
