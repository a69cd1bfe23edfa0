package server

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/files"
	"github.com/prometheus/client_golang/prometheus"
)

// FileDB is what uploads need of the database.
type FileDB interface {
	chat.FileStore
	// Setting returns a server setting, creating it with generate's value.
	Setting(ctx context.Context, name string, generate func() []byte) ([]byte, error)
	// SetFileLinker signs the file objects the store hands out.
	SetFileLinker(chat.FileLinker)
	// SetFilesFreed sets what removes contents whose last row a commit
	// deleted.
	SetFilesFreed(func(hashes []string))
}

// FilesOptions configure uploads.
type FilesOptions struct {
	Dir            string
	MaxFileBytes   int64         // default 25 MiB
	MaxTotalBytes  int64         // 0: no limit
	OrphanTTL      time.Duration // unattached uploads are removed after it (default 24 h)
	SweepInterval  time.Duration // default 1 h
	MaxImagePixels int64         // largest image decoded for a thumbnail (default 50 M)
	ThumbWorkers   int           // thumbnails made at once (default 2)
}

func (o *FilesOptions) setDefaults() {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 25 << 20
	}
	if o.OrphanTTL <= 0 {
		o.OrphanTTL = 24 * time.Hour
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Hour
	}
	if o.MaxImagePixels <= 0 {
		o.MaxImagePixels = 50_000_000
	}
	if o.ThumbWorkers <= 0 {
		o.ThumbWorkers = 2
	}
}

// Files is the file service the server's file routes use: metadata in the
// database, bytes in a files.Store, thumbnails, signed links, and a sweeper
// for what nothing uses.
type Files struct {
	opts   FilesOptions
	meta   FileDB
	blobs  *files.Store
	thumbs *files.Thumbnailer
	links  *files.Signer
	log    *slog.Logger

	uploads     prometheus.Counter
	uploadBytes prometheus.Counter

	stop chan struct{}
	wg   sync.WaitGroup
}

// linkKey names the secret of signed file links in the settings table.
const linkKey = "file_link_key"

// OpenFiles opens the files directory, loads (or creates) the link secret
// and starts the sweeper. Close stops it.
func OpenFiles(ctx context.Context, db FileDB, opts FilesOptions, m *Metrics, log *slog.Logger) (*Files, error) {
	opts.setDefaults()
	blobs, err := files.Open(opts.Dir, opts.MaxTotalBytes, db.FileRefs)
	if err != nil {
		return nil, err
	}
	key, err := db.Setting(ctx, linkKey, randomKey)
	if err != nil {
		return nil, err
	}
	f := &Files{
		opts:        opts,
		meta:        db,
		blobs:       blobs,
		thumbs:      files.NewThumbnailer(blobs, opts.ThumbWorkers, opts.MaxImagePixels),
		links:       files.NewSigner(key, "/api/v1/files/", opts.MaxImagePixels),
		log:         log,
		uploads:     prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_file_uploads_total", Help: "Files uploaded."}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "imserver_file_upload_bytes_total", Help: "Bytes of files uploaded."}),
		stop:        make(chan struct{}),
	}
	db.SetFileLinker(f.links)
	db.SetFilesFreed(f.Release)
	if m != nil {
		m.Registry.MustRegister(f.uploads, f.uploadBytes,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "imserver_file_bytes", Help: "Bytes of file contents on disk (each content once)."},
				func() float64 { b, _ := blobs.Usage(); return float64(b) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "imserver_files_stored", Help: "File contents on disk."},
				func() float64 { _, n := blobs.Usage(); return float64(n) }))
	}
	f.wg.Add(1)
	go f.sweepLoop()
	return f, nil
}

func randomKey() []byte {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather)
	return b
}

// Links signs file links (for tests and tools).
func (f *Files) Links() *files.Signer { return f.links }

// Blobs is the store of file bytes.
func (f *Files) Blobs() *files.Store { return f.blobs }

// Close stops the sweeper.
func (f *Files) Close() {
	close(f.stop)
	f.wg.Wait()
}

// Release removes the bytes of files whose rows were deleted (a deleted
// message's attachments) when no row uses them any more.
func (f *Files) Release(hashes []string) {
	if err := f.blobs.Release(context.Background(), hashes...); err != nil {
		f.log.Warn("files: removing bytes", "err", err)
	}
}

func (f *Files) sweepLoop() {
	defer f.wg.Done()
	t := time.NewTicker(f.opts.SweepInterval)
	defer t.Stop()
	for {
		f.Sweep(context.Background())
		select {
		case <-t.C:
		case <-f.stop:
			return
		}
	}
}

// sweepGrace is how old a temp file or a blob without a row must be before
// the sweeper removes it: uploads in progress are younger.
const sweepGrace = time.Hour

// Sweep removes uploads no message attached within the orphan TTL, and
// bytes on disk no row uses (left by a crash between a commit and the
// removal of the bytes it freed).
func (f *Files) Sweep(ctx context.Context) {
	hashes, err := f.meta.DeleteUnattached(ctx, time.Now().Add(-f.opts.OrphanTTL).UnixMilli())
	if err != nil {
		f.log.Warn("files: sweeping unattached uploads", "err", err)
	} else if len(hashes) > 0 {
		f.log.Info("files: removed unattached uploads", "count", len(hashes))
		f.Release(hashes)
	}
	if n, err := f.blobs.SweepDisk(ctx, sweepGrace); err != nil {
		f.log.Warn("files: sweeping the files directory", "err", err)
	} else if n > 0 {
		f.log.Info("files: removed contents no file uses", "count", n)
	}
}
