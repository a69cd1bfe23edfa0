package main

import (
	"context"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
)

// TestRetentionRefusedOnPostgres: retention deletes in the SQLite store
// only; on PostgreSQL the server refuses to start with it rather than keep
// what the operator asked to delete.
func TestRetentionRefusedOnPostgres(t *testing.T) {
	cfg := defaultConfig()
	cfg.DB = "postgres://u:secretpw@127.0.0.1:1/db"
	cfg.Retention.Days = 30
	_, _, err := openStore(context.Background(), cfg, storeOptions{})
	if chat.ErrorCode(err) != chat.EUnavailable || !strings.Contains(err.Error(), "retention") || strings.Contains(err.Error(), "secretpw") {
		t.Fatalf("retention on PostgreSQL: %v", err)
	}
}
