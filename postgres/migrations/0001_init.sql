-- The PostgreSQL schema mirrors storage/migrations/0001_init.sql; integers
-- are BIGINT (milliseconds, seqs, versions), hashes BYTEA.

-- Accounts. Only hashes of passwords and tokens are stored. Usernames are
-- unique regardless of case, as SQLite's COLLATE NOCASE makes them there.
CREATE TABLE users (
	id            TEXT PRIMARY KEY,
	username      TEXT NOT NULL,
	display_name  TEXT NOT NULL,
	password_hash TEXT NOT NULL,
	created_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX users_username ON users (lower(username));
CREATE INDEX users_username_prefix ON users (lower(username) text_pattern_ops);

CREATE TABLE tokens (
	hash       BYTEA PRIMARY KEY,
	user_id    TEXT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE INDEX tokens_user ON tokens (user_id);

-- max_seq is the largest seq stored; seq_bound the largest a seq allocator
-- outside this database (Redis) may have handed out.
CREATE TABLE conversations (
	id            TEXT PRIMARY KEY,
	kind          TEXT NOT NULL,
	name          TEXT NOT NULL DEFAULT '',
	direct_key    TEXT UNIQUE,
	members_count INTEGER NOT NULL DEFAULT 0,
	max_seq       BIGINT NOT NULL DEFAULT 0,
	seq_bound     BIGINT NOT NULL DEFAULT 0,
	version       BIGINT NOT NULL DEFAULT 0,
	created_at    BIGINT NOT NULL
);

-- One row per (conversation, user), kept after the user leaves: max_seq is
-- NULL while a member and the last visible seq after leaving or a kick.
CREATE TABLE members (
	conv_id      TEXT NOT NULL,
	user_id      TEXT NOT NULL,
	role         TEXT NOT NULL,
	min_seq      BIGINT NOT NULL DEFAULT 1,
	max_seq      BIGINT,
	last_ack_seq BIGINT NOT NULL DEFAULT 0,
	read_seq     BIGINT NOT NULL DEFAULT 0,
	version      BIGINT NOT NULL,
	joined_at    BIGINT NOT NULL,
	PRIMARY KEY (conv_id, user_id)
);
CREATE INDEX members_user ON members (user_id);

-- Messages are stored once per conversation, never per recipient.
CREATE TABLE messages (
	conv_id       TEXT NOT NULL,
	seq           BIGINT NOT NULL,
	sender_id     TEXT NOT NULL,
	client_msg_id TEXT NOT NULL,
	kind          TEXT NOT NULL,
	body          TEXT NOT NULL,
	ts            BIGINT NOT NULL,
	PRIMARY KEY (conv_id, seq)
);
CREATE UNIQUE INDEX messages_dedup ON messages (conv_id, sender_id, client_msg_id);

-- One global counter hands out versions. Every write transaction locks its
-- row first (see writer.go), so versions commit in the order they are
-- taken, on every node.
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('version', 0);
