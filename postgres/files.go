package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// Files on PostgreSQL: the metadata (files, message_files) lives here, the
// bytes in the files directory named by their sha256 (package files). With
// several nodes that directory must be one shared directory (NFS, a
// cluster file system): an upload lands on one node and is attached,
// downloaded and thumbnailed through any other (docs/scaling.md). The
// rules are storage/files.go's.

var _ chat.FileStore = (*DB)(nil)

// fileColumns are read by scanFile, in this order, from table alias f.
const fileColumns = `f.id, f.uploader_id, f.name, f.size, f.mime, f.width, f.height, f.sha256, f.created_at, COALESCE(f.attached_at, 0)`

func scanFile(row pgx.Row) (chat.FileRecord, error) {
	var f chat.FileRecord
	err := row.Scan(&f.ID, &f.Uploader, &f.Name, &f.Size, &f.Mime, &f.Width, &f.Height, &f.SHA256, &f.CreatedAt, &f.AttachedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, chat.Errorf(chat.ENotFound, "file not found")
	}
	return f, err
}

// linker signs the URLs of the file objects the store hands out, and
// hears of file contents that no row uses any more. The DB and its writer
// share it (Options.links).
type linker struct {
	l     atomic.Pointer[chat.FileLinker]
	freed atomic.Pointer[func([]string)]
}

func (l *linker) link(f *chat.File) {
	if p := l.l.Load(); p != nil {
		(*p).Link(f)
	}
}

// SetFileLinker makes every file object the store returns carry the links
// l makes. Set it before messages flow.
func (db *DB) SetFileLinker(l chat.FileLinker) { db.opts.links.l.Store(&l) }

// SetFilesFreed sets what removes file contents after a commit deleted
// their last rows (a deleted message's attachments): it runs before the
// deleting job is answered. A crash before it runs leaves bytes no row
// names, which the files sweeper removes.
func (db *DB) SetFilesFreed(f func(hashes []string)) { db.opts.links.freed.Store(&f) }

// filesFreed hands the contents a committed transaction freed to the
// files store.
func (w *writer) filesFreed(t *wtx) {
	if len(t.freed) == 0 {
		return
	}
	if f := w.opts.links.freed.Load(); f != nil {
		(*f)(t.freed)
	}
}

// eraseAttachments removes what the message (conv, seq) attaches: its
// message_files rows and the rows of files no other message attaches
// (their names are content too). The contents of those files are removed
// after the commit (filesFreed).
func eraseAttachments(t *wtx, conv string, seq int64) error {
	rows, err := t.Query(`WITH gone AS (DELETE FROM message_files WHERE conv_id = $1 AND seq = $2 RETURNING file_id)
		DELETE FROM files f USING gone WHERE f.id = gone.file_id
		AND NOT EXISTS (SELECT 1 FROM message_files mf WHERE mf.file_id = f.id AND NOT (mf.conv_id = $1 AND mf.seq = $2))
		RETURNING f.sha256`, conv, seq)
	if err != nil {
		return err
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	t.freed = append(t.freed, hashes...)
	return err
}

// CreateFile implements chat.FileStore.
func (db *DB) CreateFile(ctx context.Context, f chat.FileRecord) error {
	if !storable(f.ID) || !storable(f.Uploader) || !storable(f.Name) || !storable(f.Mime) || !storable(f.SHA256) {
		return chat.Errorf(chat.EBadRequest, "text with a NUL byte or invalid UTF-8 cannot be stored")
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO files (id, uploader_id, name, size, mime, width, height, sha256, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, f.ID, f.Uploader, f.Name, f.Size, f.Mime, f.Width, f.Height, f.SHA256, f.CreatedAt)
	return wrap(err)
}

// FileByID implements chat.FileStore.
func (db *DB) FileByID(ctx context.Context, id string) (chat.FileRecord, error) {
	if !storable(id) {
		return chat.FileRecord{}, chat.Errorf(chat.ENotFound, "file not found")
	}
	f, err := scanFile(db.pool.QueryRow(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.id = $1`, id))
	if err == nil {
		db.opts.links.link(&f.File)
	}
	return f, wrap(err)
}

// FileFor implements chat.FileStore. A message's attachment is visible to
// whoever may see that seq: from the member's min_seq up to its bound
// (max_seq, set when it left or was kicked).
func (db *DB) FileFor(ctx context.Context, id, user string) (chat.FileRecord, error) {
	if !storable(id) || !storable(user) {
		return chat.FileRecord{}, chat.Errorf(chat.ENotFound, "file not found")
	}
	f, err := scanFile(db.pool.QueryRow(ctx, `SELECT `+fileColumns+` FROM files f WHERE f.id = $1 AND (f.uploader_id = $2 OR EXISTS (
		SELECT 1 FROM message_files mf JOIN members m ON m.conv_id = mf.conv_id AND m.user_id = $2
		WHERE mf.file_id = f.id AND mf.seq >= m.min_seq AND (m.max_seq IS NULL OR mf.seq <= m.max_seq)))`, id, user))
	if err == nil {
		db.opts.links.link(&f.File)
	}
	return f, wrap(err)
}

// FileRefs implements chat.FileStore.
func (db *DB) FileRefs(ctx context.Context, sha256 string) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT COUNT(*) FROM files WHERE sha256 = $1`, sha256).Scan(&n)
	return n, wrap(err)
}

// DeleteUnattached implements chat.FileStore. It runs in the writer, so
// that a file cannot be attached between this check and its removal.
func (db *DB) DeleteUnattached(ctx context.Context, createdBefore int64) ([]string, error) {
	var hashes []string
	err := db.w.exec(ctx, func(t *wtx) error {
		rows, err := t.Query(`DELETE FROM files WHERE attached_at IS NULL AND created_at < $1 RETURNING sha256`, createdBefore)
		if err != nil {
			return err
		}
		hashes, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return hashes, wrap(err)
}

// Setting returns the value of a server setting, creating it with
// generate's value when it does not exist yet (every node ends up with the
// same value).
func (db *DB) Setting(ctx context.Context, name string, generate func() []byte) ([]byte, error) {
	return db.InitSetting(ctx, name, generate())
}

// attachable returns the files m attaches, checking that its sender
// uploaded each. A refusal is a *chat.Error; anything else fails the
// transaction.
func (w *writer) attachable(t *wtx, m *chat.Message) ([]chat.File, error) {
	files := make([]chat.File, len(m.Attachments))
	for i, a := range m.Attachments {
		f, err := scanFile(t.QueryRow(`SELECT `+fileColumns+` FROM files f WHERE f.id = $1`, a.ID))
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
	ids := make([]string, len(files))
	pos := make([]int32, len(files))
	for i := range files {
		ids[i], pos[i] = files[i].ID, int32(i)
		w.opts.links.link(&files[i])
	}
	t.queue(`INSERT INTO message_files (conv_id, seq, pos, file_id) SELECT $1::text, $2::bigint, p, f FROM unnest($3::int[], $4::text[]) AS u(p, f)`,
		m.Conv, m.Seq, pos, ids)
	t.queue(`UPDATE files SET attached_at = $1 WHERE id = ANY($2) AND attached_at IS NULL`, m.TS, ids)
	m.Attachments = files
	return nil
}

// storedFiles sets the attachments of the stored message m (a retry).
func (w *writer) storedFiles(t *wtx, m *chat.Message) error {
	rows, err := t.Query(`SELECT `+fileColumns+` FROM message_files mf JOIN files f ON f.id = mf.file_id
		WHERE mf.conv_id = $1 AND mf.seq = $2 ORDER BY mf.pos`, m.Conv, m.Seq)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return err
		}
		w.opts.links.link(&f.File)
		m.Attachments = append(m.Attachments, f.File)
	}
	return rows.Err()
}

type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// fold sets the reactions and attachments of msgs (ascending seqs of
// conv), with one range query each.
func (db *DB) fold(ctx context.Context, q queryer, conv string, msgs []chat.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	lo, hi := msgs[0].Seq, msgs[len(msgs)-1].Seq
	rows, err := q.Query(ctx, reactionsQuery, conv, lo, hi)
	if err != nil {
		return err
	}
	if err := foldReactions(rows, msgs); err != nil {
		return err
	}
	return db.foldFiles(ctx, q, conv, msgs)
}

// foldFiles sets the attachments of msgs (ascending seqs of conv).
func (db *DB) foldFiles(ctx context.Context, q queryer, conv string, msgs []chat.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	lo, hi := msgs[0].Seq, msgs[len(msgs)-1].Seq
	rows, err := q.Query(ctx, `SELECT mf.seq, `+fileColumns+` FROM message_files mf JOIN files f ON f.id = mf.file_id
		WHERE mf.conv_id = $1 AND mf.seq BETWEEN $2 AND $3 ORDER BY mf.seq, mf.pos`, conv, lo, hi)
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
			db.opts.links.link(&f.File)
			msgs[i].Attachments = append(msgs[i].Attachments, f.File)
		}
	}
	return rows.Err()
}
