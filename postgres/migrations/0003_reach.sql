-- Reach (storage/migrations/0004_reach.sql): settings, invites, disabled
-- accounts, mutes and Web Push subscriptions.
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value BYTEA NOT NULL);

-- Only a hash of the code is stored, like tokens; max_uses 0 means no
-- limit; a use is taken by one conditional UPDATE.
CREATE TABLE invites (
	id         TEXT PRIMARY KEY,
	code_hash  BYTEA NOT NULL UNIQUE,
	created_by TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	max_uses   INTEGER NOT NULL,
	uses       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX invites_creator ON invites (created_by, created_at);

ALTER TABLE users ADD COLUMN disabled_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN invited_by TEXT NOT NULL DEFAULT '';

ALTER TABLE members ADD COLUMN muted_until BIGINT NOT NULL DEFAULT 0;

CREATE TABLE push_subscriptions (
	endpoint   TEXT PRIMARY KEY,
	user_id    TEXT NOT NULL,
	p256dh     TEXT NOT NULL,
	auth       TEXT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE INDEX push_subscriptions_user ON push_subscriptions (user_id);
