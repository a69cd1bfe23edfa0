package storage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"modernc.org/sqlite"
)

// Migration 0006: messages keyed by integers (keys.go). A history of
// millions of messages is copied into the new table in batches, each its
// own transaction that also records how far the copy got (a settings
// row), so that a kill -9 costs one batch, not the copy: the next start
// goes on from there. A last short transaction swaps the tables and
// records the version. The server does not serve until it is done.

const (
	keysVersion = 6
	keysName    = "0006_integer_keys"
	// keysProgress is the settings row of the copy: "seq conv_id" of the
	// last message copied ("" before the first batch).
	keysProgress = "migration_0006_copied"
)

// keysBatch is how many messages one copy transaction takes (tests make
// it small).
var keysBatch = 100000

// keysSchema makes the ids table and the new messages table beside the
// old one. Its indexes are made before the copy, which fills them in
// key order one conversation at a time.
const keysSchema = `
CREATE TABLE ids (
	key INTEGER PRIMARY KEY,
	id  TEXT NOT NULL UNIQUE
);
INSERT INTO ids (id) SELECT id FROM users ORDER BY created_at, id;
INSERT OR IGNORE INTO ids (id) SELECT id FROM conversations ORDER BY created_at, id;
CREATE TABLE messages_v6 (
	conv          INTEGER NOT NULL,
	seq           INTEGER NOT NULL,
	sender        INTEGER NOT NULL,
	cmid_hash     INTEGER NOT NULL,
	client_msg_id TEXT NOT NULL,
	kind          TEXT NOT NULL,
	body          TEXT NOT NULL,
	ts            INTEGER NOT NULL,
	target        INTEGER,
	emoji         TEXT,
	reaction_on   INTEGER,
	reply_to      INTEGER,
	mentions      TEXT,
	edited_at     INTEGER,
	deleted       INTEGER,
	doc           INTEGER,
	PRIMARY KEY (conv, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX messages_cmid ON messages_v6 (conv, sender, cmid_hash);
CREATE INDEX messages_targets ON messages_v6 (conv, target) WHERE target IS NOT NULL;
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
INSERT INTO settings (name, value) VALUES ('` + keysProgress + `', '');
`

// The copy computes the hashes in SQL, through this function.
func init() {
	sqlite.MustRegisterDeterministicScalarFunction("imserver_cmid_hash", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		s, ok := args[0].(string)
		if !ok {
			return nil, fmt.Errorf("imserver_cmid_hash: a %T, want text", args[0])
		}
		return cmidHash(s), nil
	})
}

// migrateKeys runs migration 0006 from wherever an earlier run stopped.
func migrateKeys(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	// A batch is read several times (its end, the ids, the copy): a
	// page cache that holds one saves rereading it from the file.
	var cache int64
	if err := db.QueryRowContext(ctx, `PRAGMA cache_size`).Scan(&cache); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `PRAGMA cache_size = -131072`); err != nil {
		return err
	}
	defer db.ExecContext(ctx, `PRAGMA cache_size = `+strconv.FormatInt(cache, 10))
	return copyMigration{
		version: keysVersion, name: keysName,
		title: "migration 0006 (integer keys)", what: "messages",
		table: "messages_v6", schema: keysSchema,
		batch: copyKeysBatch,
		finish: []string{
			`DROP TABLE messages`,
			`ALTER TABLE messages_v6 RENAME TO messages`,
			`DELETE FROM settings WHERE name = '` + keysProgress + `'`,
		},
	}.run(ctx, db, log)
}

// copyKeysBatch copies the next keysBatch messages in (conv_id, seq)
// order and moves the progress row past them; done when none were left.
func copyKeysBatch(ctx context.Context, tx *sql.Tx) (n int64, done bool, at string, err error) {
	var p string
	if err := tx.QueryRowContext(ctx, `SELECT CAST(value AS TEXT) FROM settings WHERE name = ?`, keysProgress).Scan(&p); err != nil {
		return 0, false, "", fmt.Errorf("progress row: %w", err)
	}
	var fromConv string
	var fromSeq int64
	if p != "" {
		s, c, ok := strings.Cut(p, " ")
		if fromSeq, err = strconv.ParseInt(s, 10, 64); !ok || err != nil {
			return 0, false, "", fmt.Errorf("progress row %q unreadable", p)
		}
		fromConv = c
	}
	// The batch's last message: keysBatch on, or the very last.
	var toConv string
	var toSeq int64
	want := int64(keysBatch)
	err = tx.QueryRowContext(ctx, `SELECT conv_id, seq FROM messages WHERE (conv_id, seq) > (?, ?)
		ORDER BY conv_id, seq LIMIT 1 OFFSET ?`, fromConv, fromSeq, keysBatch-1).Scan(&toConv, &toSeq)
	if errors.Is(err, sql.ErrNoRows) {
		want = -1 // the rest: counted below
		err = tx.QueryRowContext(ctx, `SELECT conv_id, seq FROM messages WHERE (conv_id, seq) > (?, ?)
			ORDER BY conv_id DESC, seq DESC LIMIT 1`, fromConv, fromSeq).Scan(&toConv, &toSeq)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, true, p, nil
		}
	}
	if err != nil {
		return 0, false, "", err
	}
	args := []any{fromConv, fromSeq, toConv, toSeq}
	const inRange = `(m.conv_id, m.seq) > (?1, ?2) AND (m.conv_id, m.seq) <= (?3, ?4)`
	// Senders whose account was deleted have no users row; their
	// messages stay, so they get keys too.
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO ids (id) SELECT DISTINCT m.sender_id FROM messages m WHERE `+inRange, args...); err != nil {
		return 0, false, "", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO ids (id) SELECT DISTINCT m.conv_id FROM messages m WHERE `+inRange, args...); err != nil {
		return 0, false, "", err
	}
	const cols = `conv, seq, sender, cmid_hash, client_msg_id, kind, body, ts, target, emoji, reaction_on, reply_to, mentions, edited_at, deleted, doc`
	const from = ` FROM messages m JOIN ids ck ON ck.id = m.conv_id JOIN ids sk ON sk.id = m.sender_id WHERE ` + inRange
	res, err := tx.ExecContext(ctx, `INSERT INTO messages_v6 (`+cols+`)
		SELECT ck.key, m.seq, sk.key, imserver_cmid_hash(m.client_msg_id), m.client_msg_id, m.kind, m.body, m.ts,
			m.target, m.emoji, m.reaction_on, m.reply_to, m.mentions, m.edited_at, m.deleted, m.doc`+from+`
		ORDER BY m.conv_id, m.seq ON CONFLICT DO NOTHING`, args...)
	if err != nil {
		return 0, false, "", err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, false, "", err
	}
	if want < 0 {
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM messages m WHERE `+inRange, args...).Scan(&want); err != nil {
			return 0, false, "", err
		}
	}
	if n < want {
		// Two client_msg_ids of one sender share a hash (2^-64 a pair):
		// the later ones take the next free slot, as the writer does.
		m, err := copyCollisions(ctx, tx, args)
		if err != nil {
			return 0, false, "", err
		}
		n += m
	}
	if n != want {
		return 0, false, "", fmt.Errorf("copied %d of the %d messages after %q", n, want, p)
	}
	at = strconv.FormatInt(toSeq, 10) + " " + toConv
	if _, err := tx.ExecContext(ctx, `UPDATE settings SET value = ? WHERE name = ?`, at, keysProgress); err != nil {
		return 0, false, "", err
	}
	return n, false, at, nil
}

// copyCollisions copies the messages of the range the bulk copy left out
// because their hash slot was taken, each into its first free slot.
func copyCollisions(ctx context.Context, tx *sql.Tx, args []any) (int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT ck.key, m.seq, sk.key, m.client_msg_id
		FROM messages m JOIN ids ck ON ck.id = m.conv_id JOIN ids sk ON sk.id = m.sender_id
		WHERE (m.conv_id, m.seq) > (?1, ?2) AND (m.conv_id, m.seq) <= (?3, ?4)
		AND NOT EXISTS (SELECT 1 FROM messages_v6 n WHERE n.conv = ck.key AND n.seq = m.seq)`, args...)
	if err != nil {
		return 0, err
	}
	type left struct {
		conv, seq, sender int64
		cmid              string
	}
	var ls []left
	for rows.Next() {
		var l left
		if err := rows.Scan(&l.conv, &l.seq, &l.sender, &l.cmid); err != nil {
			rows.Close()
			return 0, err
		}
		ls = append(ls, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var n int64
	for _, l := range ls {
		stored := false
		for _, h := range cmidSlots(l.cmid) {
			res, err := tx.ExecContext(ctx, `INSERT INTO messages_v6 (conv, seq, sender, cmid_hash, client_msg_id, kind, body, ts,
					target, emoji, reaction_on, reply_to, mentions, edited_at, deleted, doc)
				SELECT ?1, m.seq, ?3, ?4, m.client_msg_id, m.kind, m.body, m.ts, m.target, m.emoji, m.reaction_on, m.reply_to,
					m.mentions, m.edited_at, m.deleted, m.doc
				FROM messages m JOIN ids ck ON ck.id = m.conv_id WHERE ck.key = ?1 AND m.seq = ?2 ON CONFLICT DO NOTHING`,
				l.conv, l.seq, l.sender, h)
			if err != nil {
				return n, err
			}
			if k, err := res.RowsAffected(); err != nil {
				return n, err
			} else if k > 0 {
				stored = true
				break
			}
		}
		if !stored {
			return n, fmt.Errorf("%d other client_msg_ids of one sender share the hash of %q", cmidProbes, l.cmid)
		}
		n++
	}
	return n, nil
}
