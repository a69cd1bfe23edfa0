-- The search index's document number is the message's id.
--
-- Until now a text message got a document number of its own (messages.doc)
-- and search_docs mapped it back to (conv_id, seq): one more row, in one
-- more table, written by the writer for every message it indexed, about a
-- tenth of its time per message. The id (migration 0009) is what a
-- document number had to be: unique, never reused, handed out in commit
-- order. A hit is now the message row itself, found by its primary key.
--
-- The index is contentless, so its documents cannot be renumbered in
-- place: it is made again, empty, and the background job (as after 0007)
-- indexes every message up to pending, newest first, with the body it has
-- then; messages sent from now on are the writer's to index. The words
-- edits took out (stale) were only ever kept in the old index.
--
-- messages.doc is neither read nor written from now on. It stays: SQLite
-- drops a column by rewriting every row of the table, minutes and a WAL as
-- large as the table on a big database, for a few bytes a row.
DROP TABLE messages_fts;
CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='', columnsize=0, detail=none, tokenize='unicode61 remove_diacritics 2');
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 2);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('pgsz', 1000);
DROP TABLE IF EXISTS search_docs;
UPDATE messages SET stale = NULL WHERE stale IS NOT NULL;
UPDATE search_backfill SET
	pending = (SELECT COALESCE(MAX(id), 0) FROM messages),
	total = (SELECT COALESCE(MAX(id), 0) FROM messages);
