-- The dedup key filter (storage/dedup_filter.go) as a graceful stop left
-- it, so that the next start need not read every key on file to build it
-- again (6 s at 10M messages, on a core the start's first work needs).
-- It is used only while mark and hi equal the counters dedup_mark and
-- messages_hi: any append or move since (by another process, or after a
-- kill) makes them differ, and the filter is built again. A later
-- migration that puts keys in dedup_1 or dedup_2 must delete the row.
CREATE TABLE dedup_filter (
	id     INTEGER PRIMARY KEY CHECK (id = 1),
	mark   INTEGER NOT NULL,
	hi     INTEGER NOT NULL,
	nbits  INTEGER NOT NULL,
	hashes INTEGER NOT NULL,
	lim    INTEGER NOT NULL,
	added  INTEGER NOT NULL,
	bits   BLOB NOT NULL
);
