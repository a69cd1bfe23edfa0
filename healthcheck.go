package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckCommand asks a running server's /healthz; it exits non-zero
// unless the answer is 200. Container images without curl use it for
// HEALTHCHECK.
func healthcheckCommand() *cobra.Command {
	var url, configPath string
	cmd := &cobra.Command{
		Use:          "healthcheck",
		Short:        "Exit 0 when the server's /healthz answers 200 (for container health checks)",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := http.DefaultClient
			if url == "" {
				cfg, err := loadConfigFrom(configPath, os.Environ(), nil)
				if err != nil {
					return err
				}
				url = healthURL(cfg.Addr)
				if cfg.TLS.enabled() {
					// The server's own address over loopback: its
					// certificate names the public host, not this one,
					// and whether it is valid is not what this asks.
					url = "https" + strings.TrimPrefix(url, "http")
					client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s %s", url, resp.Status, body)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s", body)
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "health URL (default: /healthz on the configured addr, via loopback for 0.0.0.0)")
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file (default $IMSERVER_CONFIG)")
	return cmd
}

// healthURL is /healthz on the listen address; a wildcard host is reached
// over loopback.
func healthURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/healthz"
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}
