package storage

import "strconv"

// How the connections read and keep pages, sized for a history of
// millions of messages (BENCHMARKS.md, "Cost as the data grows").

// defaultMmapMiB maps the database file up to 2 GiB (SQLite's own
// ceiling): a page the connection's cache lacks is then a memory read of
// the OS page cache, not a read call and a copy. At 1M messages the
// writer read about 1.9 pages per appended message outside its cache
// (the tails of a batch's conversations, dedup-index leaves), each a
// pread of 4 KiB. Pages in the WAL are still read with read calls; so
// are files past the mapped size. The mapping adds no memory of its own:
// the pages are the OS page cache's, which the reads copied from anyway.
// They count in RSS (as shared file pages) once touched.
const defaultMmapMiB = 2048

// mmapPragma is the mmap_size pragma for MmapMiB (below 0: off).
func mmapPragma(mib int) string {
	return "mmap_size(" + strconv.FormatInt(int64(max(mib, 0))<<20, 10) + ")"
}
