-- Server secrets and other small settings (shared with other features:
-- every migration that needs it creates it the same way).
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;

-- Uploaded files. The bytes live on disk named by sha256 (several rows may
-- share them); attached_at is NULL until a message attaches the file, and
-- the sweeper removes rows left unattached past files.orphan_ttl.
CREATE TABLE files (
	id          TEXT PRIMARY KEY,
	uploader_id TEXT NOT NULL,
	name        TEXT NOT NULL,
	size        INTEGER NOT NULL,
	mime        TEXT NOT NULL,
	width       INTEGER NOT NULL DEFAULT 0,
	height      INTEGER NOT NULL DEFAULT 0,
	sha256      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	attached_at INTEGER
);
CREATE INDEX files_sha256 ON files (sha256);
CREATE INDEX files_unattached ON files (created_at) WHERE attached_at IS NULL;

-- Which message attaches which file, in the message's order (pos).
CREATE TABLE message_files (
	conv_id TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	pos     INTEGER NOT NULL,
	file_id TEXT NOT NULL,
	PRIMARY KEY (conv_id, seq, pos)
) WITHOUT ROWID;
CREATE INDEX message_files_file ON message_files (file_id);
