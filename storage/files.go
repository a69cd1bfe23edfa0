package storage

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/imserver/imserver/chat"
)

var _ chat.FileStore = (*DB)(nil)

// fileColumns are read by scanFile, in this order, from table alias f.
const fileColumns = `f.id, f.uploader_id, f.name, f.size, f.mime, f.width, f.height, f.sha256, f.created_at, COALESCE(f.attached_at, 0)`

func scanFile(row scanner) (chat.FileRecord, error) {
	var f chat.FileRecord
	err := row.Scan(&f.ID, &f.Uploader, &f.Name, &f.Size, &f.Mime, &f.Width, &f.Height, &f.SHA256, &f.CreatedAt, &f.AttachedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return f, chat.Errorf(chat.ENotFound, "file not found")
	}
	return f, err
}

// linker signs the URLs of the file objects the store hands out, and
// hears of file contents that no row uses any more.
type linker struct {
	l     atomic.Pointer[chat.FileLinker]
	freed atomic.Pointer[func([]string)]
}

// SetFileLinker makes every file object the store returns carry the links
// l makes. Set it before messages flow.
func (db *DB) SetFileLinker(l chat.FileLinker) { db.links.l.Store(&l) }

// SetFilesFreed sets what removes file contents after a commit deleted
// their last rows (a deleted message's attachments): it runs before the
// deleting job is answered, so that an answered delete has erased the
// bytes. A crash before it runs leaves bytes no row names, which the
// files sweeper removes.
func (db *DB) SetFilesFreed(f func(hashes []string)) { db.links.freed.Store(&f) }

// eraseAttachments removes what the message (conv, seq) attaches: its
// message_files rows and the rows of files no other message attaches
// (their names are content too). The contents of those files are removed
// after the commit (SetFilesFreed).
func eraseAttachments(t *wtx, conv string, seq int64) error {
	// Prepared once: every delete comes here, nearly all without files.
	st, err := t.stmt(`DELETE FROM message_files WHERE conv_id = ? AND seq = ? RETURNING file_id`)
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(t.ctx, conv, seq)
	if err != nil {
		return err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		var sha string
		err := t.QueryRowContext(t.ctx, `DELETE FROM files WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM message_files WHERE file_id = ?1) RETURNING sha256`, id).Scan(&sha)
		if errors.Is(err, sql.ErrNoRows) {
			continue // another message still attaches it
		}
		if err != nil {
			return err
		}
		t.freed = append(t.freed, sha)
	}
	return nil
}

// eraseAttachmentsBefore erases the attachments of conv's messages up to
// seq (retention).
func eraseAttachmentsBefore(t *wtx, conv string, seq int64) error {
	rows, err := t.QueryContext(t.ctx, `SELECT DISTINCT seq FROM message_files WHERE conv_id = ? AND seq <= ?`, conv, seq)
	if err != nil {
		return err
	}
	var seqs []int64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		seqs = append(seqs, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range seqs {
		if err := eraseAttachments(t, conv, s); err != nil {
			return err
		}
	}
	return nil
}

// filesFreed hands the contents a committed transaction freed to the
// files store.
func (w *writer) filesFreed(t *wtx) {
	if len(t.freed) == 0 {
		return
	}
	if f := w.links.freed.Load(); f != nil {
		(*f)(t.freed)
	}
}

func (db *DB) link(f *chat.File) {
	if p := db.links.l.Load(); p != nil {
		(*p).Link(f)
	}
}

// CreateFile implements chat.FileStore.
func (db *DB) CreateFile(ctx context.Context, f chat.FileRecord) error {
	return db.w.exec(ctx, func(t *wtx) error {
		_, err := t.ExecContext(t.ctx, `INSERT INTO files (id, uploader_id, name, size, mime, width, height, sha256, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, f.ID, f.Uploader, f.Name, f.Size, f.Mime, f.Width, f.Height, f.SHA256, f.CreatedAt)
		return err
	})
}

// FileByID implements chat.FileStore.
func (db *DB) FileByID(ctx context.Context, id string) (chat.FileRecord, error) {
	f, err := scanFile(db.readers.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.id = ?`, id))
	if err == nil {
		db.link(&f.File)
	}
	return f, err
}

// FileFor implements chat.FileStore. A message's attachment is visible to
// whoever may see that seq: from the member's min_seq up to its bound
// (max_seq, set when it left or was kicked).
func (db *DB) FileFor(ctx context.Context, id, user string) (chat.FileRecord, error) {
	f, err := scanFile(db.readers.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.id = ?1 AND (f.uploader_id = ?2 OR EXISTS (
		SELECT 1 FROM message_files mf JOIN members m ON m.conv_id = mf.conv_id AND m.user_id = ?2
		WHERE mf.file_id = f.id AND mf.seq >= m.min_seq AND (m.max_seq IS NULL OR mf.seq <= m.max_seq)))`, id, user))
	if err == nil {
		db.link(&f.File)
	}
	return f, err
}

// FileRefs implements chat.FileStore.
func (db *DB) FileRefs(ctx context.Context, sha256 string) (int, error) {
	var n int
	err := db.readers.QueryRowContext(ctx, `SELECT COUNT(*) FROM files WHERE sha256 = ?`, sha256).Scan(&n)
	return n, err
}

// DeleteUnattached implements chat.FileStore.
func (db *DB) DeleteUnattached(ctx context.Context, createdBefore int64) ([]string, error) {
	var hashes []string
	err := db.w.exec(ctx, func(t *wtx) error {
		hashes = hashes[:0]
		rows, err := t.QueryContext(t.ctx, `DELETE FROM files WHERE attached_at IS NULL AND created_at < ? RETURNING sha256`, createdBefore)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				return err
			}
			hashes = append(hashes, h)
		}
		return rows.Err()
	})
	return hashes, err
}

// Setting returns the value of a server setting, creating it with
// generate's value when it does not exist yet (in one transaction, so
// every process sharing the database ends up with the same value).
func (db *DB) Setting(ctx context.Context, name string, generate func() []byte) ([]byte, error) {
	var v []byte
	err := db.w.exec(ctx, func(t *wtx) error {
		if _, err := t.ExecContext(t.ctx, `INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, name, generate()); err != nil {
			return err
		}
		return t.QueryRowContext(t.ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	})
	return v, err
}

// attachable returns the files m attaches, checking that its sender
// uploaded each. A refusal is a *chat.Error; anything else fails the
// transaction.
func (w *writer) attachable(t *wtx, m *chat.Message) ([]chat.File, error) {
	find, err := t.stmt(`SELECT ` + fileColumns + ` FROM files f WHERE f.id = ?`)
	if err != nil {
		return nil, err
	}
	files := make([]chat.File, len(m.Attachments))
	for i, a := range m.Attachments {
		f, err := scanFile(find.QueryRowContext(t.ctx, a.ID))
		if err == nil && f.Uploader != m.From {
			err = chat.Errorf(chat.ENotFound, "file not found")
		}
		if err != nil {
			var e *chat.Error
			if errors.As(err, &e) {
				e.Message = "attachment " + strings.ReplaceAll(a.ID, "\n", "") + ": " + e.Message
			}
			return nil, err
		}
		files[i] = f.File
	}
	return files, nil
}

// linkFiles records that m (stored) attaches files, in order, and makes
// them m's attachments.
func (w *writer) linkFiles(t *wtx, m *chat.Message, files []chat.File) error {
	ins, err := t.stmt(`INSERT INTO message_files (conv_id, seq, pos, file_id) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	mark, err := t.stmt(`UPDATE files SET attached_at = ? WHERE id = ? AND attached_at IS NULL`)
	if err != nil {
		return err
	}
	for i := range files {
		if _, err := ins.ExecContext(t.ctx, m.Conv, m.Seq, i, files[i].ID); err != nil {
			return err
		}
		if _, err := mark.ExecContext(t.ctx, m.TS, files[i].ID); err != nil {
			return err
		}
		w.link(&files[i])
	}
	m.Attachments = files
	return nil
}

func (w *writer) link(f *chat.File) {
	if p := w.links.l.Load(); p != nil {
		(*p).Link(f)
	}
}

// storedFiles sets the attachments of the stored message m.
func (w *writer) storedFiles(t *wtx, m *chat.Message) error {
	// Only retries come here: no statement kept for it.
	rows, err := t.QueryContext(t.ctx, `SELECT `+fileColumns+` FROM message_files mf JOIN files f ON f.id = mf.file_id
		WHERE mf.conv_id = ? AND mf.seq = ? ORDER BY mf.pos`, m.Conv, m.Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return err
		}
		w.link(&f.File)
		m.Attachments = append(m.Attachments, f.File)
	}
	return rows.Err()
}

// pageFiles sets the attachments of a page of messages (ascending seqs)
// with one range query.
func (db *DB) pageFiles(ctx context.Context, tx *sql.Tx, conv string, msgs []chat.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT mf.seq, `+fileColumns+` FROM message_files mf JOIN files f ON f.id = mf.file_id
		WHERE mf.conv_id = ? AND mf.seq BETWEEN ? AND ? ORDER BY mf.seq, mf.pos`, conv, msgs[0].Seq, msgs[len(msgs)-1].Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var seq int64
		var f chat.FileRecord
		if err := rows.Scan(&seq, &f.ID, &f.Uploader, &f.Name, &f.Size, &f.Mime, &f.Width, &f.Height, &f.SHA256, &f.CreatedAt, &f.AttachedAt); err != nil {
			return err
		}
		for i < len(msgs) && msgs[i].Seq < seq {
			i++
		}
		if i == len(msgs) {
			break
		}
		if msgs[i].Seq == seq {
			db.link(&f.File)
			msgs[i].Attachments = append(msgs[i].Attachments, f.File)
		}
	}
	return rows.Err()
}
