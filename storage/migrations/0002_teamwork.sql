-- v1.1: mutations, replies, mentions, search.

-- Columns of a message row. A mutation (edit, delete, reaction) names the
-- seq it changes in target; a reaction also carries its emoji and whether
-- it adds it (reaction_on). reply_to is the seq a text answers; mentions
-- the space-separated ids of the members its body mentions. edited_at and
-- deleted are the current state of a text message, kept by the writer as
-- mutations commit, so that pulls return messages folded.
ALTER TABLE messages ADD COLUMN target INTEGER;
ALTER TABLE messages ADD COLUMN emoji TEXT;
ALTER TABLE messages ADD COLUMN reaction_on INTEGER;
ALTER TABLE messages ADD COLUMN reply_to INTEGER;
ALTER TABLE messages ADD COLUMN mentions TEXT;
ALTER TABLE messages ADD COLUMN edited_at INTEGER;
ALTER TABLE messages ADD COLUMN deleted INTEGER;
-- The mutations of a message (a delete blanks its edits). Partial: a plain
-- text insert does not touch it.
CREATE INDEX messages_target ON messages (conv_id, target) WHERE target IS NOT NULL;

-- Current reactions: one row per (message, emoji, user); seq is the
-- reaction message that added it, which orders emoji by first use.
CREATE TABLE reactions (
	conv_id TEXT NOT NULL,
	target  INTEGER NOT NULL,
	emoji   TEXT NOT NULL,
	user_id TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	PRIMARY KEY (conv_id, target, emoji, user_id)
) WITHOUT ROWID;

-- Who each current text message mentions, keyed for the entry's count of
-- unread mentions: a range of one user's rows in one conversation.
CREATE TABLE mentions (
	user_id TEXT NOT NULL,
	conv_id TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	PRIMARY KEY (user_id, conv_id, seq)
) WITHOUT ROWID;

-- Seqs that unread does not count: mutations and deleted messages. Few
-- next to the text messages, so unread is the seqs past read_seq minus a
-- short range count here.
CREATE TABLE uncounted (
	conv_id TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	PRIMARY KEY (conv_id, seq)
) WITHOUT ROWID;
INSERT INTO uncounted (conv_id, seq) SELECT conv_id, seq FROM messages WHERE kind <> 'text';

-- Search: a contentless FTS5 index of the current bodies of text messages
-- (bodies live in messages; snippets are cut from there). Its rowid is a
-- document number, doc, handed out in commit order, so that one scan of a
-- query's hits from the end meets the newest first, whatever the
-- conversation; search_docs maps it back to the message, and messages.doc
-- the other way. The writer keeps all three in its transaction; a body
-- leaves the index through the 'delete' command with the old text, and
-- secure-delete removes the entries from the index pages at once instead
-- of leaving tombstones over them. automerge 2 keeps fewer segments, each
-- of which every query must seek.
ALTER TABLE messages ADD COLUMN doc INTEGER;
CREATE TABLE search_docs (
	doc     INTEGER PRIMARY KEY,
	conv_id TEXT NOT NULL,
	seq     INTEGER NOT NULL
);
INSERT INTO search_docs (doc, conv_id, seq)
	SELECT ROW_NUMBER() OVER (ORDER BY ts, conv_id, seq), conv_id, seq FROM messages WHERE kind = 'text' AND body <> '';
UPDATE messages SET doc = d.doc FROM search_docs d WHERE d.conv_id = messages.conv_id AND d.seq = messages.seq;
CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='', columnsize=0, tokenize='unicode61 remove_diacritics 2');
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 2);
-- The messages stored before this migration are not indexed here (that
-- took minutes at a million messages, before the server could answer):
-- 0007 rebuilds this table and hands them to the background indexer.
