-- v1.1 (storage/migrations/0002_teamwork.sql and 0005_files.sql): mutations,
-- replies, mentions, search and files metadata.

-- A mutation (edit, delete, reaction) names the seq it changes in target;
-- a reaction carries its emoji and whether it adds it. reply_to is the seq
-- a text answers; mentions the space-separated ids of the members its body
-- mentions. edited_at and deleted are the current state of a text message,
-- kept by the writer as mutations commit, so that pulls return messages
-- folded.
ALTER TABLE messages ADD COLUMN target BIGINT;
ALTER TABLE messages ADD COLUMN emoji TEXT;
ALTER TABLE messages ADD COLUMN reaction_on BOOLEAN;
ALTER TABLE messages ADD COLUMN reply_to BIGINT;
ALTER TABLE messages ADD COLUMN mentions TEXT;
ALTER TABLE messages ADD COLUMN edited_at BIGINT;
ALTER TABLE messages ADD COLUMN deleted BOOLEAN;
CREATE INDEX messages_target ON messages (conv_id, target) WHERE target IS NOT NULL;
-- A delete or an edit updates message rows in place; the old versions
-- (with the erased text) stay in the pages until VACUUM. messages is
-- append-mostly and large, where autovacuum's default (20% of the table
-- dead) would wait for ever: 1,000 dead rows plus 1% start it.
ALTER TABLE messages SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01);

-- Search: the current body of a text message as a tsvector, written by the
-- writer (postgres/search.go: lowercased, accents removed and cut into
-- words in Go, as SQLite's unicode61 tokenizer does, so that both stores
-- find the same messages without the unaccent extension). NULL for what
-- is not searchable (mutations, deleted or empty messages).
ALTER TABLE messages ADD COLUMN search tsvector;
CREATE INDEX messages_search ON messages USING GIN (search);

-- Current reactions: one row per (message, emoji, user); seq is the
-- reaction message that added it, which orders emoji by first use.
CREATE TABLE reactions (
	conv_id TEXT NOT NULL,
	target  BIGINT NOT NULL,
	emoji   TEXT NOT NULL,
	user_id TEXT NOT NULL,
	seq     BIGINT NOT NULL,
	PRIMARY KEY (conv_id, target, emoji, user_id)
);

-- Who each current text message mentions, keyed for the entry's count of
-- unread mentions.
CREATE TABLE mentions (
	user_id TEXT NOT NULL,
	conv_id TEXT NOT NULL,
	seq     BIGINT NOT NULL,
	PRIMARY KEY (user_id, conv_id, seq)
);

-- Seqs that unread does not count: mutations and deleted messages.
CREATE TABLE uncounted (
	conv_id TEXT NOT NULL,
	seq     BIGINT NOT NULL,
	PRIMARY KEY (conv_id, seq)
);
INSERT INTO uncounted (conv_id, seq) SELECT conv_id, seq FROM messages WHERE kind <> 'text';

-- Uploaded files. The bytes live in the files directory named by sha256
-- (shared by every node: docs/scaling.md); attached_at is NULL until a
-- message attaches the file.
CREATE TABLE files (
	id          TEXT PRIMARY KEY,
	uploader_id TEXT NOT NULL,
	name        TEXT NOT NULL,
	size        BIGINT NOT NULL,
	mime        TEXT NOT NULL,
	width       INTEGER NOT NULL DEFAULT 0,
	height      INTEGER NOT NULL DEFAULT 0,
	sha256      TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	attached_at BIGINT
);
CREATE INDEX files_sha256 ON files (sha256);
CREATE INDEX files_unattached ON files (created_at) WHERE attached_at IS NULL;

-- Which message attaches which file, in the message's order (pos).
CREATE TABLE message_files (
	conv_id TEXT NOT NULL,
	seq     BIGINT NOT NULL,
	pos     INTEGER NOT NULL,
	file_id TEXT NOT NULL,
	PRIMARY KEY (conv_id, seq, pos)
);
CREATE INDEX message_files_file ON message_files (file_id);

-- The search vectors of the messages stored before this migration are
-- written by the next start (backfillSearch, postgres/search_backfill.go:
-- the words are cut in Go); this row says that work is pending.
INSERT INTO settings (name, value) VALUES ('search_backfill', '\x01') ON CONFLICT (name) DO NOTHING;
