-- The search index without positions (detail=none), and indexed in the
-- background.
--
-- Without positions (detail=none) each entry of the index is a document
-- number: the index is half the size (0.27x the bodies' bytes instead of
-- 0.57x at 1M messages), an insert writes half as much, and two-word
-- searches are faster. Phrases are then checked against the body
-- (storage/search_tokens.go).
--
-- The index is contentless, so it cannot be rebuilt from itself: it is
-- created empty, and the documents that exist now (every doc up to
-- pending) are indexed by the background job (storage/search_backfill.go)
-- in small transactions of the writer, newest first, lowering pending as
-- it goes; a restart resumes from it. Documents above pending (sent from
-- now on, or edited into a body) are the writer's to index, as before.
DROP TABLE IF EXISTS messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='', columnsize=0, detail=none, tokenize='unicode61 remove_diacritics 2');
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 2);
-- Leaf pages of 1000 bytes instead of 4050: a secure delete finds its
-- doc in each segment's doclist of every word of the old text by jumping
-- to the right page and then reading it entry by entry. Without positions
-- an entry is a byte or two, so a 4050-byte page holds thousands, and the
-- team mix cost 25-30% more CPU per message than with detail=full
-- (BENCHMARKS.md, "Search index without positions"); with 1000-byte
-- pages it costs the same.
INSERT INTO messages_fts (messages_fts, rank) VALUES ('pgsz', 1000);
-- One row: docs at or below pending are not indexed yet; total is where
-- pending started (for the progress that search reports).
CREATE TABLE search_backfill (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	pending INTEGER NOT NULL,
	total   INTEGER NOT NULL
);
INSERT INTO search_backfill (id, pending, total)
	SELECT 1, COALESCE(MAX(doc), 0), COALESCE(MAX(doc), 0) FROM search_docs;
