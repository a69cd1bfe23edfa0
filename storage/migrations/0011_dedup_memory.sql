-- The newest dedup level is kept in memory instead of in dedup_0
-- (storage/dedup_mem.go): its entries are those of the messages above
-- counters.dedup_mark, which a start reads back from the messages table.
-- An append then writes no dedup page of its own: dedup_0 took a page
-- write per message (its keys are random within a sender's range) and a
-- statement journal for its INSERT … SELECT, the costliest statement of
-- an append.
--
-- What dedup_0 holds (at most a few tens of thousands of keys) joins
-- dedup_1, and every message stored so far is then below the mark.
-- messages_hi is the largest message id ever handed out: ids are given by
-- the writer from it, never reused even when retention deletes the newest
-- rows, so the rows above the mark are exactly those whose keys may not
-- be in dedup_1 or dedup_2 yet (a move in progress puts them there before
-- it raises the mark).
INSERT OR IGNORE INTO dedup_1 (conv, sender, cmid_hash, seq) SELECT conv, sender, cmid_hash, seq FROM dedup_0;
DROP TABLE dedup_0;
INSERT INTO counters (name, value) SELECT 'messages_hi', COALESCE(MAX(id), 0) FROM messages;
INSERT INTO counters (name, value) SELECT 'dedup_mark', COALESCE(MAX(id), 0) FROM messages;
