-- Server secrets and settings (the VAPID keys of Web Push). The files
-- branch may create the same table the same way.
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;

-- Invites: only a hash of the code is stored, like tokens. id is the first
-- 16 hex digits of that hash, for lists and revoking. max_uses 0 means no
-- limit; a use is taken by one conditional UPDATE.
CREATE TABLE invites (
	id         TEXT PRIMARY KEY,
	code_hash  BLOB NOT NULL UNIQUE,
	created_by TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	max_uses   INTEGER NOT NULL,
	uses       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX invites_creator ON invites (created_by, created_at);

-- disabled_at: when an admin disabled the account, 0 while enabled.
ALTER TABLE users ADD COLUMN disabled_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN invited_by TEXT NOT NULL DEFAULT '';

-- muted_until: when the member's mute of the conversation ends, 0 for none.
ALTER TABLE members ADD COLUMN muted_until INTEGER NOT NULL DEFAULT 0;

-- Web Push subscriptions, one per browser (endpoint).
CREATE TABLE push_subscriptions (
	endpoint   TEXT PRIMARY KEY,
	user_id    TEXT NOT NULL,
	p256dh     TEXT NOT NULL,
	auth       TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX push_subscriptions_user ON push_subscriptions (user_id);
