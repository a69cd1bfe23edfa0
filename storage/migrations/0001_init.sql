-- Accounts. Only hashes of passwords and tokens are stored.
CREATE TABLE users (
	id            TEXT PRIMARY KEY,
	username      TEXT NOT NULL UNIQUE COLLATE NOCASE,
	display_name  TEXT NOT NULL,
	password_hash TEXT NOT NULL,
	created_at    INTEGER NOT NULL
);

CREATE TABLE tokens (
	hash       BLOB PRIMARY KEY,
	user_id    TEXT NOT NULL,
	created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX tokens_user ON tokens (user_id);

-- max_seq is the largest seq stored; seq_bound the largest a seq allocator
-- outside this database (Redis) may have handed out.
CREATE TABLE conversations (
	id            TEXT PRIMARY KEY,
	kind          TEXT NOT NULL,
	name          TEXT NOT NULL DEFAULT '',
	direct_key    TEXT UNIQUE,
	members_count INTEGER NOT NULL DEFAULT 0,
	max_seq       INTEGER NOT NULL DEFAULT 0,
	seq_bound     INTEGER NOT NULL DEFAULT 0,
	version       INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL
);

-- One row per (conversation, user), kept after the user leaves: max_seq is
-- NULL while a member and the last visible seq after leaving or a kick.
-- version is the user's entry version for changes of this row; an entry's
-- version is the larger of it and the conversation's while a member.
CREATE TABLE members (
	conv_id      TEXT NOT NULL,
	user_id      TEXT NOT NULL,
	role         TEXT NOT NULL,
	min_seq      INTEGER NOT NULL DEFAULT 1,
	max_seq      INTEGER,
	last_ack_seq INTEGER NOT NULL DEFAULT 0,
	read_seq     INTEGER NOT NULL DEFAULT 0,
	version      INTEGER NOT NULL,
	joined_at    INTEGER NOT NULL,
	PRIMARY KEY (conv_id, user_id)
) WITHOUT ROWID;
CREATE INDEX members_user ON members (user_id);

-- Messages are stored once per conversation, never per recipient.
CREATE TABLE messages (
	conv_id       TEXT NOT NULL,
	seq           INTEGER NOT NULL,
	sender_id     TEXT NOT NULL,
	client_msg_id TEXT NOT NULL,
	kind          TEXT NOT NULL,
	body          TEXT NOT NULL,
	ts            INTEGER NOT NULL,
	PRIMARY KEY (conv_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX messages_dedup ON messages (conv_id, sender_id, client_msg_id);

-- One global counter hands out versions: larger than every earlier one for
-- every user, which is all the sync protocol needs.
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('version', 0);
