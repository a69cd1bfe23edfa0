package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/storage"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

// migrateToPostgresCommand copies a SQLite database into an empty
// PostgreSQL one, so that a team that outgrows one host keeps its history.
func migrateToPostgresCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate-to-postgres --from FILE --to URL",
		Short: "Copy a SQLite database into an empty PostgreSQL database (stop the servers first)",
		Long: `Copies every table of the SQLite database FILE into the PostgreSQL database
at URL (which must hold no imserver data yet), in one transaction, then checks
the row counts of every table and each conversation's largest seq. Stop every
imserver using FILE first: what they write meanwhile would not be copied.
FILE is first brought to this version's schema, in place, as this version's
server would (back it up first to keep the older version's).
The search vectors of the copied messages are written after the copy.
Uploaded files' bytes are not in the database: copy the files directory
(files.dir, or FILE-files) to the directory the PostgreSQL nodes share.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return errors.New("--from FILE and --to postgres://... are both required")
			}
			if !isPostgres(to) {
				return fmt.Errorf("--to must be a postgres:// URL, not %q", to)
			}
			return migrateToPostgres(cmd.Context(), from, to, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "SQLite database file")
	cmd.Flags().StringVar(&to, "to", "", "PostgreSQL URL postgres://user:password@host/db")
	return cmd
}

// tableCopy is one table copied: the columns both schemas have.
type tableCopy struct {
	name    string
	columns []string
	rows    int64
}

func migrateToPostgres(ctx context.Context, from, to string, out io.Writer) error {
	// The store would make a new, empty database of a mistyped path and
	// copy nothing, successfully.
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	// What a running server stores after the copy would be missing from
	// PostgreSQL, and the file's schema is upgraded in place below.
	if err := storage.CheckUnused(ctx, from); err != nil {
		return fmt.Errorf("--from %s: %w", from, err)
	}
	// Opening with the store brings the file to the current schema, so
	// that both sides have the same tables (the source is upgraded in
	// place, as a start of this version's server would).
	sdb, err := storage.Open(ctx, from, storage.Options{})
	if err != nil {
		return fmt.Errorf("open %s: %w", from, err)
	}
	if err := sdb.Close(); err != nil {
		return err
	}
	src, err := sql.Open("sqlite", "file:"+from+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer src.Close()
	// One read transaction: a consistent snapshot of the file.
	stx, err := src.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer stx.Rollback()

	pdb, err := postgres.Open(ctx, to, postgres.Options{})
	if err != nil {
		return err
	}
	defer pdb.Close()
	pool := pdb.Pool()

	tables, err := sqliteTables(ctx, stx)
	if err != nil {
		return err
	}
	for _, t := range []string{"users", "conversations", "messages"} {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT COUNT(*) FROM `+pgx.Identifier{t}.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("target %s: %w", t, err)
		}
		if n > 0 {
			return fmt.Errorf("the target database already holds %d rows in %s: migrate into an empty database", n, t)
		}
	}
	ptx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer ptx.Rollback(ctx)
	var copies []tableCopy
	var nuls int64 // NUL characters replaced (pgText)
	for _, table := range tables {
		cols, err := sqliteColumns(ctx, stx, table)
		if err != nil {
			return err
		}
		cols = textKeyed(table, cols)
		pcols, err := pgColumns(ctx, ptx, table)
		if err != nil {
			return err
		}
		if len(pcols) == 0 {
			var n int64
			if err := stx.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+table+`"`).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("table %s (%d rows) has no PostgreSQL counterpart in this imserver: not migrated", table, n)
			}
			continue
		}
		var both []string
		for _, c := range cols {
			if slices.Contains(pcols, c) {
				both = append(both, c)
				continue
			}
			// A column the target lacks may only be empty (or derived:
			// the search index's document numbers, the arrival order of
			// SQLite's rows, the words an edit left in SQLite's index,
			// PostgreSQL indexing the current body; the mutation counts,
			// PostgreSQL keeping its mutations in uncounted, below).
			if table == "messages" && (c == "doc" || c == "id" || c == "stale" || c == "muts") ||
				table == "conversations" && (c == "muts" || c == "muts_cut") {
				continue
			}
			var n int64
			if err := stx.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+table+`" WHERE "`+c+`" IS NOT NULL`).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("column %s.%s holds data (%d rows) that this imserver's PostgreSQL schema has no place for: not migrated", table, c, n)
			}
		}
		// Seed rows of the migrations (the version counter) give way to
		// the copied ones.
		if _, err := ptx.Exec(ctx, `DELETE FROM `+pgx.Identifier{table}.Sanitize()); err != nil {
			return err
		}
		bools, err := pgBoolColumns(ctx, ptx, table)
		if err != nil {
			return err
		}
		n, err := copyTable(ctx, stx, ptx, table, both, bools, &nuls)
		if err != nil {
			return fmt.Errorf("copy %s: %w", table, err)
		}
		copies = append(copies, tableCopy{table, both, n})
	}
	if err := checkCopy(ctx, stx, ptx, copies); err != nil {
		return err
	}
	// SQLite counts its mutations on their rows (storage/muts.go) and
	// keeps only the older ones in uncounted; PostgreSQL keeps them all
	// there, so that unread leaves them out.
	if _, err := ptx.Exec(ctx, `INSERT INTO uncounted (conv_id, seq) SELECT conv_id, seq FROM messages WHERE target IS NOT NULL ON CONFLICT DO NOTHING`); err != nil {
		return err
	}
	// The search vectors are cut from the copied bodies by the store's
	// backfill (postgres/search_backfill.go), which this row asks for; it
	// runs at the next Open, below.
	if _, err := ptx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ('search_backfill', '\x01') ON CONFLICT (name) DO NOTHING`); err != nil {
		return err
	}
	if err := ptx.Commit(ctx); err != nil {
		return err
	}
	pdb.Close()
	again, err := postgres.Open(ctx, to, postgres.Options{})
	if err != nil {
		return fmt.Errorf("search vectors: %w", err)
	}
	again.Close()
	for _, c := range copies {
		fmt.Fprintf(out, "%-24s %d rows\n", c.name, c.rows)
	}
	if nuls > 0 {
		fmt.Fprintf(out, "%d NUL characters in text, which PostgreSQL cannot hold, copied as U+FFFD\n", nuls)
	}
	fmt.Fprintf(out, "copied %s to %s; counts and max seqs checked\n", from, displayDB(to))
	return nil
}

// sqliteTables lists the tables to copy: not SQLite's own, not the
// migration record (each store keeps its own), not FTS shadow tables
// (the target builds its own index).
func sqliteTables(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name <> 'schema_migrations' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Shadow tables of virtual tables (name_data, name_idx, ...), the
	// search index's document map and background-indexing progress, which
	// the target's own index replaces, and the dedup levels (SQLite's
	// layout of the dedup key: PostgreSQL keeps a unique index on messages).
	virtual, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'`)
	if err != nil {
		return nil, err
	}
	var vnames []string
	for virtual.Next() {
		var v string
		if err := virtual.Scan(&v); err != nil {
			virtual.Close()
			return nil, err
		}
		vnames = append(vnames, v)
	}
	virtual.Close()
	if err := virtual.Err(); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		shadow := n == "search_docs" || n == "ids" || n == "search_backfill" || strings.HasPrefix(n, "dedup_")
		for _, v := range vnames {
			if strings.HasPrefix(n, v+"_") {
				shadow = true
			}
		}
		if !shadow {
			out = append(out, n)
		}
	}
	return out, nil
}

func sqliteColumns(ctx context.Context, tx *sql.Tx, table string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

func pgColumns(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// keyedColumns are the text ids that SQLite keeps as integer keys
// (migration 0006: the ids table maps them back), by table; PostgreSQL
// keeps the text.
var keyedColumns = map[string]map[string]string{
	"messages": {"conv_id": "conv", "sender_id": "sender"},
}

// textKeyed names the columns of a SQLite table as PostgreSQL has them:
// a key column by the text id it stands for, without the dedup hash
// (derived from client_msg_id).
func textKeyed(table string, cols []string) []string {
	keyed := keyedColumns[table]
	if keyed == nil {
		return cols
	}
	out := make([]string, 0, len(cols))
	for _, c := range cols {
		if table == "messages" && c == "cmid_hash" {
			continue
		}
		for text, key := range keyed {
			if c == key {
				c = text
			}
		}
		out = append(out, c)
	}
	return out
}

// selectCols is the select list of cols: a text id kept as a key is read
// through the ids table.
func selectCols(table string, cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		if key, ok := keyedColumns[table][c]; ok {
			q[i] = `(SELECT id FROM ids WHERE key = "` + key + `") AS "` + c + `"`
			continue
		}
		q[i] = `"` + c + `"`
	}
	return strings.Join(q, ", ")
}

// pgBoolColumns returns the boolean columns of table: SQLite stores them
// as integers.
func pgBoolColumns(ctx context.Context, tx pgx.Tx, table string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND data_type = 'boolean'`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, err
}

// copyTable streams table's rows into PostgreSQL with COPY; the integers
// of bools' columns become booleans.
func copyTable(ctx context.Context, stx *sql.Tx, ptx pgx.Tx, table string, cols []string, bools map[string]bool, nuls *int64) (int64, error) {
	rows, err := stx.QueryContext(ctx, `SELECT `+selectCols(table, cols)+` FROM "`+table+`"`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var scanErr error
	n, err := ptx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		if err := rows.Scan(ptrs...); err != nil {
			scanErr = err
			return nil, err
		}
		for i, c := range cols {
			switch v := vals[i].(type) {
			case int64:
				if bools[c] {
					vals[i] = v != 0
				}
			case string:
				vals[i] = pgText(v, nuls)
			}
		}
		return vals, nil
	}))
	return n, errors.Join(err, scanErr)
}

// pgText is s as PostgreSQL's text can hold it: older versions stored
// text with NUL characters in SQLite (chat/text.go refuses them now),
// which PostgreSQL cannot hold; each becomes U+FFFD, the replacement
// character, and is counted in *nuls.
func pgText(s string, nuls *int64) string {
	if !strings.ContainsRune(s, 0) {
		return s
	}
	*nuls += int64(strings.Count(s, "\x00"))
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// checkCopy compares what the target holds with the source: every table's
// row count, and each conversation's count and largest seq.
func checkCopy(ctx context.Context, stx *sql.Tx, ptx pgx.Tx, copies []tableCopy) error {
	for _, c := range copies {
		var src, dst int64
		if err := stx.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+c.name+`"`).Scan(&src); err != nil {
			return err
		}
		if err := ptx.QueryRow(ctx, `SELECT COUNT(*) FROM `+pgx.Identifier{c.name}.Sanitize()).Scan(&dst); err != nil {
			return err
		}
		if src != dst {
			return fmt.Errorf("check: %s has %d rows in SQLite but %d in PostgreSQL", c.name, src, dst)
		}
	}
	type convStat struct{ n, maxSeq, stored int64 }
	src := map[string]convStat{}
	rows, err := stx.QueryContext(ctx, `SELECT c.id, COUNT(m.seq), COALESCE(MAX(m.seq), 0), c.max_seq
		FROM conversations c LEFT JOIN ids k ON k.id = c.id LEFT JOIN messages m ON m.conv = k.key GROUP BY c.id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var s convStat
		if err := rows.Scan(&id, &s.n, &s.maxSeq, &s.stored); err != nil {
			rows.Close()
			return err
		}
		src[id] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	prows, err := ptx.Query(ctx, `SELECT c.id, COUNT(m.seq), COALESCE(MAX(m.seq), 0), c.max_seq
		FROM conversations c LEFT JOIN messages m ON m.conv_id = c.id GROUP BY c.id`)
	if err != nil {
		return err
	}
	defer prows.Close()
	seen := 0
	for prows.Next() {
		var id string
		var d convStat
		if err := prows.Scan(&id, &d.n, &d.maxSeq, &d.stored); err != nil {
			return err
		}
		if s, ok := src[id]; !ok || s != d {
			return fmt.Errorf("check: conversation %s: SQLite has %d messages up to seq %d (max_seq %d), PostgreSQL %d up to %d (max_seq %d)",
				id, s.n, s.maxSeq, s.stored, d.n, d.maxSeq, d.stored)
		}
		seen++
	}
	if err := prows.Err(); err != nil {
		return err
	}
	if seen != len(src) {
		return fmt.Errorf("check: %d conversations in SQLite, %d in PostgreSQL", len(src), seen)
	}
	return nil
}
