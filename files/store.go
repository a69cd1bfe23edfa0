package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	// Decoders for image.DecodeConfig and thumbnails.
	_ "image/gif"
	_ "image/jpeg"
	_ "image/png"

	_ "golang.org/x/image/webp"
)

// Errors of Write; the server maps them to the protocol's codes.
var (
	ErrTooLarge = errors.New("file is over the size limit")
	ErrEmpty    = errors.New("file is empty")
	ErrQuota    = errors.New("the server's file storage is full")
	// ErrIncomplete wraps a failure to read the body (the client gone).
	ErrIncomplete = errors.New("upload incomplete")
)

// bodyReader tells the body's read errors from the disk's write errors.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	return n, err
}

// Refs counts the database rows that use the bytes of a hash; the store
// removes bytes only when none does.
type Refs func(ctx context.Context, sha256 string) (int, error)

// Store keeps file bytes under dir, at dir/ab/abcdef... (the hex SHA-256,
// under a directory of its first two digits so that no directory grows
// huge), with thumbnails beside them and uploads in progress in dir/tmp.
type Store struct {
	dir      string
	refs     Refs
	maxTotal int64 // 0: no limit

	used  atomic.Int64 // bytes of the blobs on disk
	count atomic.Int64 // blobs on disk
	locks [64]sync.Mutex
	// pending counts the uploads of each hash whose row is being
	// written: their bytes must stay.
	pmu     sync.Mutex
	pending map[string]int
}

// Open opens (creating if needed) the store at dir. maxTotal bounds the
// bytes kept (0 for no bound).
func Open(dir string, maxTotal int64, refs Refs) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o750); err != nil {
		return nil, fmt.Errorf("files directory: %w", err)
	}
	s := &Store{dir: dir, refs: refs, maxTotal: maxTotal, pending: map[string]int{}}
	err := s.walkBlobs(func(_ string, _ string, info fs.FileInfo) error {
		s.used.Add(info.Size())
		s.count.Add(1)
		return nil
	})
	return s, err
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Usage returns the bytes and the number of blobs on disk.
func (s *Store) Usage() (bytes, count int64) { return s.used.Load(), s.count.Load() }

// Path is where the bytes of a hash live.
func (s *Store) Path(sha string) string { return BlobPath(s.dir, sha) }

// BlobPath is where the bytes of a hash live under dir.
func BlobPath(dir, sha string) string {
	return filepath.Join(dir, sha[:2], sha)
}

// ValidHash reports whether sha is a lower-case hex SHA-256.
func ValidHash(sha string) bool {
	if len(sha) != 64 {
		return false
	}
	for i := 0; i < len(sha); i++ {
		if c := sha[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (s *Store) lock(sha string) *sync.Mutex {
	var b [1]byte
	hex.Decode(b[:], []byte(sha[:2]))
	return &s.locks[int(b[0])%len(s.locks)]
}

// Upload is a file written to a temp file and not yet kept.
type Upload struct {
	SHA256  string
	Size    int64
	Sniffed string // http.DetectContentType of the first bytes
	Width   int    // image dimensions from the header, 0 when not an image
	Height  int
	Format  string // image format name ("png", "jpeg", ...) or ""

	tmp string
}

// sniffer keeps the first 512 bytes written, for http.DetectContentType.
type sniffer struct {
	buf [512]byte
	n   int
}

func (s *sniffer) Write(p []byte) (int, error) {
	s.n += copy(s.buf[s.n:], p)
	return len(p), nil
}

// Write streams r to a temp file, hashing as it goes, and fsyncs it. It
// never holds more than a copy buffer of the body in memory. Over limit
// bytes it fails with ErrTooLarge, an empty body with ErrEmpty, past the
// store's total with ErrQuota; on any failure (the client gone mid-body
// too) the temp file is removed.
func (s *Store) Write(r io.Reader, limit int64) (u *Upload, err error) {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "upload-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	var sniff sniffer
	h := sha256.New()
	max := limit
	if s.maxTotal > 0 {
		room := s.maxTotal - s.used.Load()
		if room <= 0 {
			return nil, ErrQuota
		}
		max = min(max, room)
	}
	n, err := copyBuffered(io.MultiWriter(f, h, &sniff), io.LimitReader(bodyReader{r}, max+1))
	if err != nil {
		return nil, err
	}
	switch {
	case n > max && max < limit:
		return nil, ErrQuota
	case n > limit:
		return nil, ErrTooLarge
	case n == 0:
		return nil, ErrEmpty
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	u = &Upload{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n, Sniffed: http.DetectContentType(sniff.buf[:sniff.n]), tmp: f.Name()}
	// Image dimensions come from the header alone: nothing is decoded.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if cfg, format, err := image.DecodeConfig(f); err == nil && cfg.Width > 0 && cfg.Height > 0 {
		u.Width, u.Height, u.Format = cfg.Width, cfg.Height, format
		// The size as shown: a photo turned a quarter by its EXIF
		// orientation (exif.go) is as wide as it is stored high.
		if format == "jpeg" {
			if _, err := f.Seek(0, io.SeekStart); err == nil && Swapped(jpegOrientation(f)) {
				u.Width, u.Height = u.Height, u.Width
			}
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return u, nil
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// copyBuffered is io.Copy with a pooled buffer big enough that a 20 MiB
// upload is a few dozen writes, not thousands.
func copyBuffered(w io.Writer, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{w}, r, *bp)
}

// Discard removes an upload that will not be kept.
func (s *Store) Discard(u *Upload) {
	if u != nil && u.tmp != "" {
		os.Remove(u.tmp)
		u.tmp = ""
	}
}

// Keep moves the upload to its hash's place (or drops it when the same
// bytes are already there) and runs record, which stores its row. While
// record runs the bytes are marked pending, and no removal of them
// happens: the lock is not held across record, because record waits for
// the database's writer, and the writer itself removes freed contents
// (Release) after its commits. If record fails, bytes that no row uses are
// removed again.
func (s *Store) Keep(ctx context.Context, u *Upload, record func() error) error {
	defer s.Discard(u)
	mu := s.lock(u.SHA256)
	mu.Lock()
	err := s.place(u)
	if err == nil {
		s.addPending(u.SHA256, 1)
	}
	mu.Unlock()
	if err != nil {
		return err
	}
	rerr := record()
	mu.Lock()
	defer mu.Unlock()
	s.addPending(u.SHA256, -1)
	if rerr != nil {
		s.releaseLocked(context.WithoutCancel(ctx), u.SHA256)
	}
	return rerr
}

func (s *Store) addPending(sha string, d int) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.pending[sha] += d; s.pending[sha] <= 0 {
		delete(s.pending, sha)
	}
}

func (s *Store) isPending(sha string) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.pending[sha] > 0
}

// place renames the upload to its hash's path, or touches the bytes
// already there (so that the sweeper's grace period counts from now).
// Called with the hash's lock held.
func (s *Store) place(u *Upload) error {
	final := s.Path(u.SHA256)
	if _, err := os.Stat(final); err == nil {
		now := time.Now()
		os.Chtimes(final, now, now)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o750); err != nil {
		return err
	}
	if err := os.Rename(u.tmp, final); err != nil {
		return err
	}
	u.tmp = ""
	syncDir(filepath.Dir(final))
	s.used.Add(u.Size)
	s.count.Add(1)
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Open opens the bytes of a hash.
func (s *Store) Open(sha string) (*os.File, error) {
	if !ValidHash(sha) {
		return nil, fs.ErrNotExist
	}
	return os.Open(s.Path(sha))
}

// Release removes the bytes of each hash that no row uses any more (after
// the rows were deleted), with their thumbnails.
func (s *Store) Release(ctx context.Context, hashes ...string) error {
	var errs []error
	for _, sha := range hashes {
		if !ValidHash(sha) {
			continue
		}
		mu := s.lock(sha)
		mu.Lock()
		errs = append(errs, s.releaseLocked(ctx, sha))
		mu.Unlock()
	}
	return errors.Join(errs...)
}

func (s *Store) releaseLocked(ctx context.Context, sha string) error {
	if s.isPending(sha) {
		return nil // an upload of the same bytes is recording its row
	}
	n, err := s.refs(ctx, sha)
	if err != nil || n > 0 {
		return err
	}
	path := s.Path(sha)
	info, err := os.Stat(path)
	if err == nil {
		if err := os.Remove(path); err != nil {
			return err
		}
		s.used.Add(-info.Size())
		s.count.Add(-1)
	}
	for _, t := range thumbExts {
		os.Remove(path + t)
	}
	return nil
}

// walkBlobs calls fn for every blob on disk (not thumbnails or temp files).
func (s *Store) walkBlobs(fn func(path, sha string, info fs.FileInfo) error) error {
	subs, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !ValidHash(e.Name()) || !strings.HasPrefix(e.Name(), sub.Name()) {
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			if err := fn(filepath.Join(s.dir, sub.Name(), e.Name()), e.Name(), info); err != nil {
				return err
			}
		}
	}
	return nil
}

// SweepDisk removes what a crash or a failed upload can leave behind: temp
// files and blobs no row uses, both older than grace (an upload in
// progress, or bytes whose row is being written, are younger). It returns
// how many blobs it removed.
func (s *Store) SweepDisk(ctx context.Context, grace time.Duration) (int, error) {
	cutoff := time.Now().Add(-grace)
	tmp := filepath.Join(s.dir, "tmp")
	if ents, err := os.ReadDir(tmp); err == nil {
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
				os.Remove(filepath.Join(tmp, e.Name()))
			}
		}
	}
	var old []string
	var total, count int64
	err := s.walkBlobs(func(_, sha string, info fs.FileInfo) error {
		total += info.Size()
		count++
		if info.ModTime().Before(cutoff) {
			old = append(old, sha)
		}
		return ctx.Err()
	})
	// The counters started from a walk too; what the process did not
	// write (left by another) is counted from here on.
	s.used.Store(total)
	s.count.Store(count)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, sha := range old {
		mu := s.lock(sha)
		mu.Lock()
		n, err := s.refs(ctx, sha)
		if err == nil && n == 0 {
			// Only old bytes: Keep touches bytes it reuses.
			if info, err := os.Stat(s.Path(sha)); err == nil && info.ModTime().Before(cutoff) {
				if s.releaseLocked(ctx, sha) == nil {
					removed++
				}
			}
		}
		mu.Unlock()
		if err != nil {
			return removed, err
		}
	}
	s.sweepThumbs(cutoff)
	return removed, nil
}

// sweepThumbs removes old thumbnails whose bytes are gone (one made while
// its file was being removed).
func (s *Store) sweepThumbs(cutoff time.Time) {
	subs, _ := os.ReadDir(s.dir)
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		dir := filepath.Join(s.dir, sub.Name())
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			for _, ext := range thumbExts {
				base, ok := strings.CutSuffix(e.Name(), ext)
				if !ok || !ValidHash(base) {
					continue
				}
				if _, err := os.Stat(filepath.Join(dir, base)); !errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
					os.Remove(filepath.Join(dir, e.Name()))
				}
			}
		}
	}
}
