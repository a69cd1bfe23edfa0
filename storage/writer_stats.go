package storage

// WriterStats are the writer's totals since Open: what each commit costs
// in pages, the figure that grows with the database (BENCHMARKS.md,
// issue 15) when a batch's index entries land on pages of their own.
type WriterStats struct {
	Commits  int64 // write transactions committed
	WALPages int64 // pages those commits wrote to the WAL
}

// WriterStats returns the writer's totals so far.
func (db *DB) WriterStats() WriterStats {
	return WriterStats{Commits: db.w.commits.Load(), WALPages: db.w.walPages.Load()}
}
