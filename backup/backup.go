// Package backup writes and restores imserver's whole state as one
// archive: a consistent snapshot of the database, every file it references,
// and a manifest with counts and a SHA-256 of every entry.
package backup

import (
	"archive/tar"
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
	"time"

	"github.com/imserver/imserver/files"
	"github.com/imserver/imserver/storage"
)

// Archive entry names.
const (
	dbEntry       = "imserver.db"
	filesPrefix   = "files/"
	manifestEntry = "manifest.json"
)

// Manifest is the archive's last entry: what it holds and the checksum of
// every other entry. It comes last so that the archive is written in one
// pass; restore reads everything into a staging directory and checks it
// against the manifest before anything is moved into place.
type Manifest struct {
	Format        int       `json:"format"`
	Version       string    `json:"imserver_version"`
	Schema        int       `json:"schema_version"`
	CreatedAt     time.Time `json:"created_at"`
	Users         int64     `json:"users"`
	Conversations int64     `json:"conversations"`
	Messages      int64     `json:"messages"`
	Files         int64     `json:"files"`
	// Store is "postgres" for an archive of a PostgreSQL database (a
	// pg_dump in custom format), empty for SQLite.
	Store string `json:"store,omitempty"`
	// PGSchema is the one schema a PostgreSQL archive holds (the search_path
	// of the URL it was made from; pg_dump --schema), empty for the whole
	// database. pg_restore loads it into that schema by name, so a restore
	// is refused to a URL whose search_path names another.
	PGSchema string  `json:"pg_schema,omitempty"`
	Entries  []Entry `json:"entries"`
	// Missing are contents the snapshot names that were gone from disk
	// when they were copied (deleted meanwhile).
	Missing []string `json:"missing,omitempty"`
}

// Entry is one archived file.
type Entry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

const manifestFormat = 1

// Options say what to back up or restore.
type Options struct {
	DB       string // database file, or a PostgreSQL URL
	FilesDir string // files directory
	Version  string // imserver's version, recorded in the manifest
	// Progress, when set, receives a progress line now and then (a
	// terminal: lines end with \r).
	Progress io.Writer
}

// Create writes a backup of a database that a server may be using to
// archive path (gzip-compressed when it ends in .gz or .tgz). The archive
// appears under its name only once complete.
func Create(ctx context.Context, path string, o Options) (Manifest, error) {
	if IsPostgres(o.DB) {
		return createPostgres(ctx, path, o)
	}
	m := Manifest{Format: manifestFormat, Version: o.Version, CreatedAt: time.Now().UTC()}
	work, err := os.MkdirTemp(filepath.Dir(path), ".imserver-backup-*")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(work)
	snap := filepath.Join(work, dbEntry)
	if err := storage.Snapshot(ctx, o.DB, snap); err != nil {
		return m, err
	}
	info, err := storage.Inspect(ctx, snap)
	if err != nil {
		return m, err
	}
	m.Schema, m.Users, m.Conversations, m.Messages, m.Files = info.Schema, info.Users, info.Conversations, info.Messages, info.Files
	return writeArchive(ctx, path, o, m, dbEntry, snap, info.Hashes)
}

// writeArchive writes the database snapshot db (as entry dbName), the files
// named by hashes and the manifest to path, under its name only once
// complete.
func writeArchive(ctx context.Context, path string, o Options, m Manifest, dbName, snap string, hashes []string) (Manifest, error) {
	// What will be copied, for the progress line.
	var total int64
	if st, err := os.Stat(snap); err == nil {
		total += st.Size()
	}
	for _, h := range hashes {
		if st, err := os.Stat(files.BlobPath(o.FilesDir, h)); err == nil {
			total += st.Size()
		}
	}
	p := newProgress(o.Progress, "backup", total)

	out, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return m, err
	}
	defer func() {
		out.Close()
		os.Remove(out.Name())
	}()
	var w io.Writer = out
	var gz *gzip.Writer
	if isGzip(path) {
		gz, _ = gzip.NewWriterLevel(out, gzip.BestSpeed)
		w = gz
	}
	tw := tar.NewWriter(w)
	add := func(name, src string) (bool, error) {
		f, err := os.Open(src)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return false, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o640, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}); err != nil {
			return false, err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(tw, h, p), f)
		if err != nil {
			return false, err
		}
		if n != st.Size() {
			return false, fmt.Errorf("%s changed while it was copied", src)
		}
		m.Entries = append(m.Entries, Entry{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return true, nil
	}
	if _, err := add(dbName, snap); err != nil {
		return m, err
	}
	if len(hashes) > 0 && o.FilesDir == "" {
		return m, fmt.Errorf("the database names %d stored files but no files directory is set (files.dir or --files-dir)", len(hashes))
	}
	for _, h := range hashes {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		ok, err := add(filesPrefix+h[:2]+"/"+h, files.BlobPath(o.FilesDir, h))
		if err != nil {
			return m, err
		}
		if !ok {
			m.Missing = append(m.Missing, h)
			continue
		}
		if e := m.Entries[len(m.Entries)-1]; e.SHA256 != h {
			return m, fmt.Errorf("file %s on disk does not match its name (sha256 %s): the files directory is damaged", h, e.SHA256)
		}
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: manifestEntry, Mode: 0o640, Size: int64(len(mb)), ModTime: m.CreatedAt, Typeflag: tar.TypeReg}); err != nil {
		return m, err
	}
	if _, err := tw.Write(mb); err != nil {
		return m, err
	}
	if err := tw.Close(); err != nil {
		return m, err
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return m, err
		}
	}
	if err := out.Sync(); err != nil {
		return m, err
	}
	if err := out.Close(); err != nil {
		return m, err
	}
	if err := os.Rename(out.Name(), path); err != nil {
		return m, err
	}
	p.done()
	return m, nil
}

func isGzip(path string) bool {
	return strings.HasSuffix(path, ".gz") || strings.HasSuffix(path, ".tgz")
}
