package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Snapshot writes a consistent copy of the database at path to dst (which
// must not exist) with VACUUM INTO, on a connection of its own: a running
// server keeps writing meanwhile, and the copy is the database as of one
// moment (one read transaction).
func Snapshot(ctx context.Context, path, dst string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return fmt.Errorf("snapshot of %s: %w", path, err)
	}
	return nil
}

// SnapshotInfo describes a database file (a snapshot) without migrating it.
type SnapshotInfo struct {
	Schema        int
	Users         int64
	Conversations int64
	Messages      int64
	Files         int64
	// Hashes are the contents the file rows use, each once.
	Hashes []string
}

// Inspect reads what a backup's manifest records of the database at path,
// opened read-only.
func Inspect(ctx context.Context, path string) (SnapshotInfo, error) {
	var info SnapshotInfo
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&"+url.Values{"_pragma": {"query_only(1)"}}.Encode())
	if err != nil {
		return info, err
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&info.Schema); err != nil {
		return info, fmt.Errorf("%s is not an imserver database: %w", path, err)
	}
	for _, c := range []struct {
		table string
		n     *int64
	}{{"users", &info.Users}, {"conversations", &info.Conversations}, {"messages", &info.Messages}, {"files", &info.Files}} {
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+c.table).Scan(c.n)
		if err != nil && !(c.table == "files" && strings.Contains(err.Error(), "no such table")) {
			return info, err
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT sha256 FROM files ORDER BY sha256`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return info, nil
		}
		return info, err
	}
	defer rows.Close()
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return info, err
		}
		info.Hashes = append(info.Hashes, h)
	}
	return info, errors.Join(rows.Err())
}
