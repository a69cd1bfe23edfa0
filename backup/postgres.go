package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/storage"
	"github.com/jackc/pgx/v5"
)

// pgDumpEntry is the archive entry of a PostgreSQL database: pg_dump's
// custom format, which pg_restore reads (and lists: pg_restore -l).
const pgDumpEntry = "imserver.pgdump"

// storePostgres is Manifest.Store of a PostgreSQL archive.
const storePostgres = "postgres"

// IsPostgres reports whether db is a PostgreSQL URL rather than a file.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// pgTool finds a PostgreSQL client program: on PATH, then in pgToolDirs.
func pgTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range pgToolDirs() {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (not on PATH, not in pg_config --bindir): install PostgreSQL's client programs "+
		"of the server's major version or newer (Debian: postgresql-client), or do it by hand: "+
		"pg_dump --format=custom --file=imserver.pgdump DBNAME and a copy of the files directory; "+
		"pg_restore --no-owner --single-transaction --dbname=DBNAME imserver.pgdump", name)
}

// pgToolDirs are where pgTool looks past PATH: `pg_config --bindir`, then
// Debian's /usr/lib/postgresql/*/bin, newest first (a pg_dump older than
// the server refuses to dump it). A variable for tests.
var pgToolDirs = func() []string {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(matches, func(i, j int) bool { return pgMajor(matches[i]) > pgMajor(matches[j]) })
	return append(dirs, matches...)
}

func pgMajor(path string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(path)), 64)
	return v
}

// pgTarget is how the client programs reach the database of a URL: libpq's
// environment variables, so that the password never shows in a process
// list, and the URL's parameters that only pgx knows (search_path, pool
// settings) do not trip libpq.
type pgTarget struct {
	env    []string
	schema string // the URL's search_path, when it names one schema
}

func pgTargetOf(rawURL string) (pgTarget, error) {
	var t pgTarget
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return t, fmt.Errorf("database URL: %w", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return t, fmt.Errorf("database URL: %w", err)
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	env = append(env, "PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User,
		"PGDATABASE="+cfg.Database, "PGAPPNAME=imserver")
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	q := u.Query()
	for param, v := range map[string]string{"sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY"} {
		if s := q.Get(param); s != "" {
			env = append(env, v+"="+s)
		}
	}
	t.env = env
	if sp := cfg.RuntimeParams["search_path"]; sp != "" && !strings.ContainsAny(sp, ", \"") {
		t.schema = sp
	}
	return t, nil
}

// run runs a client program against the target; its stderr becomes the
// error.
func (t pgTarget) run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = t.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(prog), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// createPostgres backs up a PostgreSQL database that servers may be using:
// pg_dump (custom format) of a snapshot exported by a repeatable-read
// transaction, in which the counts and the list of files are read too, so
// the archive's files are exactly those its dump names.
func createPostgres(ctx context.Context, path string, o Options) (Manifest, error) {
	m := Manifest{Format: manifestFormat, Version: o.Version, CreatedAt: time.Now().UTC(), Store: storePostgres}
	dump, err := pgTool("pg_dump")
	if err != nil {
		return m, err
	}
	t, err := pgTargetOf(o.DB)
	if err != nil {
		return m, err
	}
	conn, err := pgx.Connect(ctx, o.DB)
	if err != nil {
		return m, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return m, err
	}
	defer tx.Rollback(context.Background())
	var snapshot string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil {
		return m, err
	}
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&m.Schema); err != nil {
		return m, fmt.Errorf("not an imserver database: %w", err)
	}
	for _, c := range []struct {
		table string
		n     *int64
	}{{"users", &m.Users}, {"conversations", &m.Conversations}, {"messages", &m.Messages}, {"files", &m.Files}} {
		if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM `+c.table).Scan(c.n); err != nil {
			return m, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT sha256 FROM files ORDER BY sha256`)
	if err != nil {
		return m, err
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return m, err
	}

	work, err := os.MkdirTemp(filepath.Dir(path), ".imserver-backup-*")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(work)
	file := filepath.Join(work, pgDumpEntry)
	args := []string{"--format=custom", "--no-password", "--snapshot=" + snapshot, "--file=" + file}
	if t.schema != "" {
		args = append(args, "--schema="+t.schema)
		m.PGSchema = t.schema
	}
	if err := t.run(ctx, dump, args...); err != nil {
		return m, err
	}
	if err := tx.Rollback(ctx); err != nil {
		return m, err
	}
	return writeArchive(ctx, path, o, m, pgDumpEntry, file, hashes)
}

// pgHasData reports whether the database of url holds imserver's tables.
func pgHasData(ctx context.Context, url string) (bool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.Background())
	var name *string
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations')::text`).Scan(&name); err != nil {
		return false, err
	}
	return name != nil, nil
}

// restorePostgres loads the checked dump into the database with
// pg_restore in one transaction (an error changes nothing there); with
// force the objects of the dump are dropped first.
func restorePostgres(ctx context.Context, m Manifest, dumpFile string, o Options, force bool) error {
	prog, err := pgTool("pg_restore")
	if err != nil {
		return err
	}
	t, err := pgTargetOf(o.DB)
	if err != nil {
		return err
	}
	if err := pgSameSchema(m, t); err != nil {
		return err
	}
	args := []string{"--no-password", "--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error"}
	if force {
		args = append(args, "--clean", "--if-exists")
	}
	args = append(args, "--dbname="+pgDBName(o.DB), dumpFile)
	if err := t.run(ctx, prog, args...); err != nil {
		return fmt.Errorf("restoring the database (nothing of it was changed): %w", err)
	}
	return nil
}

// pgSameSchema refuses an archive of one schema for a target whose
// search_path names another (or none): pg_restore would load the archive
// into the schema it names, not the target's, and with --clean drop and
// reload that schema, perhaps the live source's.
func pgSameSchema(m Manifest, t pgTarget) error {
	if m.PGSchema == t.schema {
		return nil
	}
	name := func(s string) string {
		if s == "" {
			return "the whole database (no single schema in search_path)"
		}
		return "schema " + strconv.Quote(s)
	}
	return fmt.Errorf("the archive holds %s and the target's search_path is %s: pg_restore would write into the archive's, not the target's; nothing was restored (restore to a URL with the archive's search_path)", name(m.PGSchema), name(t.schema))
}

// pgDBName is the database name of url, for pg_restore's --dbname (which
// otherwise prints a list); the rest of the connection comes from the
// environment.
func pgDBName(rawURL string) string {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// errWrongStore says an archive and a target of different stores.
func errWrongStore(m Manifest, o Options) error {
	if m.Store == storePostgres && !IsPostgres(o.DB) {
		return errors.New("this archive holds a PostgreSQL database (pg_dump): restore it with --db postgres://... (or a config whose db is one)")
	}
	if m.Store != storePostgres && IsPostgres(o.DB) {
		return errors.New("this archive holds a SQLite database: restore it to a file (--db FILE), then copy it into PostgreSQL with imserver migrate-to-postgres")
	}
	return nil
}

// knownSchema is the newest schema this binary knows for the archive's
// store.
func knownSchema(m Manifest) int {
	if m.Store == storePostgres {
		return postgres.KnownSchema()
	}
	return storage.KnownSchema()
}
