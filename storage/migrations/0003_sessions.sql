-- Sessions: a token as its user sees it. id is random (not derived from the
-- token), so it can be shown and used to revoke without being a credential.
-- last_used_at is written at most once a minute per token (kept in memory
-- in between).
ALTER TABLE tokens ADD COLUMN session_id TEXT;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN user_agent TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN address TEXT NOT NULL DEFAULT '';
UPDATE tokens SET session_id = lower(hex(randomblob(16))), last_used_at = created_at;
CREATE UNIQUE INDEX tokens_session ON tokens (session_id);

-- One-time WebSocket tickets (hashed), bound to the token that asked for
-- one, so that revoking the token also ends the sockets opened with them.
CREATE TABLE tickets (
	hash       BLOB PRIMARY KEY,
	user_id    TEXT NOT NULL,
	token_hash BLOB NOT NULL,
	expires_at INTEGER NOT NULL,
	used       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX tickets_expiry ON tickets (expires_at);
