package backup

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/imserver/imserver/files"
	"github.com/imserver/imserver/storage"
)

// ErrNotEmpty refuses to restore over existing data without force.
var ErrNotEmpty = errors.New("the data directory is not empty (the database or the files directory exists): restore refuses to overwrite it without --force")

// Restore unpacks archive path into o.DB and o.FilesDir. Every entry is
// written to a staging directory beside the database and checked against
// the manifest (sizes, SHA-256, file names equal to their content hash,
// nothing missing or extra) before anything is moved into place: a
// corrupt archive leaves the target as it was. Existing data is replaced
// only with force. Stop the server first.
func Restore(ctx context.Context, path string, o Options, force bool) (Manifest, error) {
	var m Manifest
	pg := IsPostgres(o.DB)
	if pg {
		// Before reading a big archive: can it be restored at all?
		if _, err := pgTool("pg_restore"); err != nil {
			return m, err
		}
	}
	if !pg {
		if err := storage.CheckUnused(ctx, o.DB); err != nil {
			return m, fmt.Errorf("%s: %w", o.DB, err)
		}
	}
	if !force {
		has, err := hasData(ctx, o)
		if err != nil {
			return m, err
		}
		if has {
			return m, ErrNotEmpty
		}
	}
	// The staging directory is beside where the files go, so that they
	// are renamed into place.
	near := filepath.Dir(o.DB)
	if pg {
		near = ""
		if o.FilesDir != "" {
			near = filepath.Dir(o.FilesDir)
		}
	}
	if near != "" {
		if err := os.MkdirAll(near, 0o750); err != nil {
			return m, err
		}
	}
	stage, err := os.MkdirTemp(near, ".imserver-restore-*")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(stage)
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	var total int64
	if st, err := f.Stat(); err == nil {
		total = st.Size()
	}
	p := newProgress(o.Progress, "restore", total)
	br := bufio.NewReader(io.TeeReader(f, p))
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return m, corrupt(err)
		}
		defer gz.Close()
		r = gz
	}
	got := map[string]Entry{}
	var manifest []byte
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return m, corrupt(err)
		}
		if h.Typeflag != tar.TypeReg {
			return m, corrupt(fmt.Errorf("entry %q is not a regular file", h.Name))
		}
		if h.Name == manifestEntry {
			if manifest, err = io.ReadAll(io.LimitReader(tr, 64<<20)); err != nil {
				return m, corrupt(err)
			}
			continue
		}
		dst, ok := stagePath(stage, h.Name)
		if !ok {
			return m, corrupt(fmt.Errorf("unexpected entry %q", h.Name))
		}
		if _, dup := got[h.Name]; dup {
			return m, corrupt(fmt.Errorf("entry %q appears twice", h.Name))
		}
		e, err := extract(tr, dst)
		if err != nil {
			return m, corrupt(fmt.Errorf("%s: %w", h.Name, err))
		}
		e.Name = h.Name
		got[h.Name] = e
	}
	if manifest == nil {
		return m, corrupt(errors.New("no manifest"))
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return m, corrupt(fmt.Errorf("manifest: %w", err))
	}
	if err := errWrongStore(m, o); err != nil {
		return m, err
	}
	if err := check(m, got); err != nil {
		return m, err
	}
	if pg {
		if o.FilesDir == "" && m.Files > 0 {
			return m, fmt.Errorf("the archive holds %d files but no files directory is set (files.dir or --files-dir): nothing was restored", m.Files)
		}
		if err := restorePostgres(ctx, m, filepath.Join(stage, pgDumpEntry), o, force); err != nil {
			return m, err
		}
		if o.FilesDir != "" {
			if err := placeFiles(stage, o, force); err != nil {
				return m, fmt.Errorf("the database is restored, the files are not: %w", err)
			}
		}
	} else if err := place(stage, o, force); err != nil {
		return m, err
	}
	p.done()
	return m, nil
}

func corrupt(err error) error {
	return fmt.Errorf("the archive is damaged or not an imserver backup (nothing was restored): %w", err)
}

// hasData reports whether the target holds a database or any file.
func hasData(ctx context.Context, o Options) (bool, error) {
	if o.FilesDir != "" {
		if ents, err := os.ReadDir(o.FilesDir); err == nil && len(ents) > 0 {
			return true, nil
		}
	}
	if IsPostgres(o.DB) {
		return pgHasData(ctx, o.DB)
	}
	for _, p := range []string{o.DB, o.DB + "-wal"} {
		if _, err := os.Stat(p); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// stagePath maps an entry name to its place in the staging directory,
// refusing anything but the names a backup writes (no "..", no absolute
// paths).
func stagePath(stage, name string) (string, bool) {
	if name == dbEntry || name == pgDumpEntry {
		return filepath.Join(stage, name), true
	}
	rest, ok := strings.CutPrefix(name, filesPrefix)
	if !ok {
		return "", false
	}
	dir, sha, ok := strings.Cut(rest, "/")
	if !ok || !files.ValidHash(sha) || dir != sha[:2] {
		return "", false
	}
	return filepath.Join(stage, "files", dir, sha), true
}

func extract(r io.Reader, dst string) (Entry, error) {
	var e Entry
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return e, err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return e, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		return e, err
	}
	if err := f.Sync(); err != nil {
		return e, err
	}
	return Entry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, f.Close()
}

// check compares what was extracted with the manifest.
func check(m Manifest, got map[string]Entry) error {
	if m.Format != manifestFormat {
		return fmt.Errorf("backup format %d: this imserver reads format %d", m.Format, manifestFormat)
	}
	if known := knownSchema(m); m.Schema > known {
		return fmt.Errorf("the backup's schema version is %d, newer than this imserver's (%d): restore it with imserver %s or later", m.Schema, known, m.Version)
	}
	listed := map[string]bool{}
	for _, e := range m.Entries {
		g, ok := got[e.Name]
		if !ok {
			return corrupt(fmt.Errorf("%s is listed in the manifest but not in the archive", e.Name))
		}
		if g.Size != e.Size || g.SHA256 != e.SHA256 {
			return corrupt(fmt.Errorf("%s: checksum mismatch (sha256 %s, %d bytes; the manifest says %s, %d bytes)", e.Name, g.SHA256, g.Size, e.SHA256, e.Size))
		}
		if sha, ok := strings.CutPrefix(e.Name, filesPrefix); ok && !strings.HasSuffix(sha, "/"+e.SHA256) {
			return corrupt(fmt.Errorf("%s does not hold the content its name says", e.Name))
		}
		listed[e.Name] = true
	}
	for name := range got {
		if !listed[name] {
			return corrupt(fmt.Errorf("%s is not listed in the manifest", name))
		}
	}
	want := dbEntry
	if m.Store == storePostgres {
		want = pgDumpEntry
	}
	if !listed[want] {
		return corrupt(errors.New("no database in the archive"))
	}
	return nil
}

// place moves the staged database and files into place, replacing what is
// there (with force; restore checked before that there was nothing).
func place(stage string, o Options, force bool) error {
	if force {
		for _, p := range []string{o.DB, o.DB + "-wal", o.DB + "-shm", o.DB + "-journal"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	if err := placeFiles(stage, o, force); err != nil {
		return err
	}
	return os.Rename(filepath.Join(stage, dbEntry), o.DB)
}

// placeFiles moves the staged files directory into place.
func placeFiles(stage string, o Options, force bool) error {
	if force {
		if err := os.RemoveAll(o.FilesDir); err != nil {
			return err
		}
	}
	staged := filepath.Join(stage, "files")
	if err := os.MkdirAll(staged, 0o750); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.FilesDir), 0o750); err != nil {
		return err
	}
	if err := os.Rename(staged, o.FilesDir); err != nil {
		return fmt.Errorf("moving the files into place (the files directory must be on the database's file system): %w", err)
	}
	return nil
}
