-- The search index without positions (detail=none), and indexed in the
-- background.
--
-- With positions (detail=full) every edit and delete, whose secure delete
-- rewrites the doclist of each word of the old text, cost the team mix a
-- fifth of its send rate; without them each entry is a document number
-- and a doclist is a fraction of the size. Phrases are then checked
-- against the body (storage/search_tokens.go).
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
-- One row: docs at or below pending are not indexed yet; total is where
-- pending started (for the progress that search reports).
CREATE TABLE search_backfill (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	pending INTEGER NOT NULL,
	total   INTEGER NOT NULL
);
INSERT INTO search_backfill (id, pending, total)
	SELECT 1, COALESCE(MAX(doc), 0), COALESCE(MAX(doc), 0) FROM search_docs;
