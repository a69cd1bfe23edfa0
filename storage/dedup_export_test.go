package storage

import (
	"context"
	"database/sql"
)

// SetDedupBatchForTest sets how many entries each copy transaction of
// migration 0010 takes.
func SetDedupBatchForTest(n int) { dedupBatch = n }

// MigrateToForTest migrates the database at path up to schema last.
func MigrateToForTest(path string, last int) error {
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	defer raw.Close()
	return migrateTo(context.Background(), raw, last, nil)
}
