-- Sessions (storage/migrations/0003_sessions.sql): a token as its user sees
-- it, and one-time WebSocket tickets.
ALTER TABLE tokens ADD COLUMN session_id TEXT;
ALTER TABLE tokens ADD COLUMN last_used_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN user_agent TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN address TEXT NOT NULL DEFAULT '';
UPDATE tokens SET session_id = md5(random()::text || hash::text), last_used_at = created_at;
CREATE UNIQUE INDEX tokens_session ON tokens (session_id);

CREATE TABLE tickets (
	hash       BYTEA PRIMARY KEY,
	user_id    TEXT NOT NULL,
	token_hash BYTEA NOT NULL,
	expires_at BIGINT NOT NULL,
	used       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tickets_expiry ON tickets (expires_at);
