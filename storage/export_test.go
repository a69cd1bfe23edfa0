package storage

import (
	"io/fs"
	"testing/fstest"
)

// AddTestMigration makes migrate apply one more migration after the
// embedded ones (for the fault tests of the external test package).
func AddTestMigration(name, body string) {
	m := fstest.MapFS{}
	names, _ := fs.Glob(embeddedMigrationFiles, "migrations/*.sql")
	for _, n := range names {
		b, _ := fs.ReadFile(embeddedMigrationFiles, n)
		m[n] = &fstest.MapFile{Data: b}
	}
	m["migrations/"+name] = &fstest.MapFile{Data: []byte(body)}
	migrations = m
}

// SetTestPragmas sets pragmas every new connection runs (max_page_count
// stands for a full disk).
func SetTestPragmas(p ...string) { testPragmas = p }

// IntegrityCheck runs PRAGMA integrity_check.
func (db *DB) IntegrityCheck() (string, error) {
	var s string
	err := db.readers.QueryRow("PRAGMA integrity_check").Scan(&s)
	return s, err
}
