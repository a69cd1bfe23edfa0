package storage

import (
	"fmt"
	"sync"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite writes a commit to the WAL one frame at a time, each frame with
// two write calls (its 24-byte header, then its page), and then fsyncs the
// file: a batch that dirtied 100 pages cost 200 pwrite system calls, a
// tenth of the server's CPU in `bench --scenario interactive`. The
// writer's connection opens its WAL through walBufVFS instead, a thin
// layer over SQLite's own VFS that gathers the frames in memory and
// writes them in a few large calls when SQLite syncs the file (or reads
// what is gathered, or writes somewhere else than at its end).
//
// This is only sound when every commit syncs the WAL (synchronous FULL or
// EXTRA, SQLite's own fsync in COMMIT): SQLite makes a commit visible to
// other connections, in the shared-memory index, right after that fsync,
// so nothing another connection or process may read is still in the
// buffer. With NORMAL (or the pipelined syncer, which runs the connection
// with NORMAL) a commit is visible with no sync before it, so Open uses
// the plain VFS then. What the buffer holds is byte for byte what the file
// would hold without it; a crash loses it as it loses an unsynced write,
// and nothing in it was acknowledged.
//
// A transaction that spilled pages to the WAL and then rolled back leaves
// its frames in the buffer, beyond the WAL's committed end. Written out
// later, they would land on the frames another connection or process
// committed at those offsets meanwhile. So the database file is wrapped
// too: when its connection gives up the WAL's write lock (xShmLock, after
// a commit's sync or a rollback), whatever that connection's WAL still
// holds was never committed and is dropped.
const walBufVFS = "imserver-walbuf"

// walBufCap bounds the gathered bytes; a larger batch is written in
// pieces of this size (about a thousand 4 KiB pages).
const walBufCap = 4 << 20

// walWriteMax is the most one write call of the unix VFS writes (it
// masks the length with 0x1ffff), rounded down to 4 KiB.
const walWriteMax = 0x1ffff &^ 0xfff

// walFile is the state kept, in SQLite's own memory, right after the unix
// VFS's file object of a file opened through walBufVFS and wrapped: a WAL
// (all fields) or a database file (methods only).
type walFile struct {
	methods    uintptr // the unix VFS's io methods of this file
	buf        uintptr // walBufCap bytes, allocated at the first write
	start, end int64   // the file offsets of the gathered bytes
}

var (
	walBufOnce sync.Once
	walBufErr  error
	// walBufBase is the unix VFS, and walBufExtra the size of its file
	// objects: walFile lies that far into ours.
	walBufBase  uintptr
	walBufExtra int64
	walBufMu    sync.Mutex
	// walBufMethods are walBufVFS's io methods by the unix ones they wrap
	// (the unix VFS has several tables, one per locking style), for WALs
	// and for database files.
	walBufMethods = map[[2]uintptr]uintptr{}
	// The open files, by name: the WALs, and the WAL's name of each
	// database file. Only the writer's connection opens files through
	// walBufVFS, but tests open two stores on one file.
	walBufWALs  = map[string]map[uintptr]struct{}{}
	walBufNames = map[uintptr]string{}
)

// registerWalBuf registers walBufVFS with SQLite, once per process.
func registerWalBuf() error {
	walBufOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		base := sqlite3.Xsqlite3_vfs_find(tls, 0)
		if base == 0 {
			walBufErr = fmt.Errorf("storage: SQLite has no default VFS")
			return
		}
		walBufBase = base
		bv := (*sqlite3.Tsqlite3_vfs)(cptr(base))
		walBufExtra = (int64(bv.FszOsFile) + 7) &^ 7
		p, err := cAlloc(tls, int(unsafe.Sizeof(sqlite3.Tsqlite3_vfs{}))+len(walBufVFS)+1)
		if err != nil {
			walBufErr = err
			return
		}
		v := (*sqlite3.Tsqlite3_vfs)(cptr(p))
		*v = *bv
		v.FpNext = 0
		v.FszOsFile = int32(walBufExtra) + int32(unsafe.Sizeof(walFile{}))
		name := p + unsafe.Sizeof(sqlite3.Tsqlite3_vfs{})
		copy(unsafe.Slice((*byte)(cptr(name)), len(walBufVFS)+1), walBufVFS+"\x00")
		v.FzName = name
		*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&v.FxOpen)) = walBufOpen
		if rc := sqlite3.Xsqlite3_vfs_register(tls, p, 0); rc != sqlite3.SQLITE_OK {
			walBufErr = fmt.Errorf("storage: registering the WAL buffer VFS: SQLite error %d", rc)
		}
	})
	return walBufErr
}

// cAlloc allocates n zeroed bytes of C memory, never freed: the VFS and
// its method tables live as long as the process.
func cAlloc(tls *libc.TLS, n int) (uintptr, error) {
	p := libc.Xcalloc(tls, 1, uint64(n))
	if p == 0 {
		return 0, fmt.Errorf("storage: out of memory")
	}
	return p, nil
}

// cptr is the pointer to C memory at p: SQLite's heap and its static
// data, which Go's collector neither moves nor frees (go vet cannot tell
// such a uintptr from one that held a Go pointer).
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func walState(f uintptr) *walFile { return (*walFile)(cptr(f + uintptr(walBufExtra))) }

func walBufOpen(tls *libc.TLS, _ uintptr, zName, f uintptr, flags int32, pOutFlags uintptr) int32 {
	base := (*sqlite3.Tsqlite3_vfs)(cptr(walBufBase))
	rc := (*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{base.FxOpen})))(tls, walBufBase, zName, f, flags, pOutFlags)
	pm := (*sqlite3.Tsqlite3_file)(cptr(f)).FpMethods
	wal := flags&sqlite3.SQLITE_OPEN_WAL != 0
	if rc != sqlite3.SQLITE_OK || pm == 0 || zName == 0 || !wal && flags&sqlite3.SQLITE_OPEN_MAIN_DB == 0 {
		return rc // journals and temporary files keep the unix methods
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cptr(pm))
	if wal && m.FxDeviceCharacteristics != 0 &&
		(*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{m.FxDeviceCharacteristics})))(tls, f)&sqlite3.SQLITE_IOCAP_POWERSAFE_OVERWRITE == 0 {
		// Without powersafe overwrite SQLite pads a commit to a sector
		// and writes part of the padding after its sync: a commit would
		// become visible with bytes still gathered.
		return rc
	}
	if !wal && m.FiVersion < 2 {
		return rc // no shared-memory locks to follow
	}
	ours, err := walBufTable(tls, pm, wal)
	if err != nil {
		return sqlite3.SQLITE_NOMEM
	}
	*walState(f) = walFile{methods: pm}
	(*sqlite3.Tsqlite3_file)(cptr(f)).FpMethods = ours
	name := libc.GoString(zName)
	walBufMu.Lock()
	if wal {
		if walBufWALs[name] == nil {
			walBufWALs[name] = map[uintptr]struct{}{}
		}
		walBufWALs[name][f] = struct{}{}
		walBufNames[f] = name
	} else {
		walBufNames[f] = name + "-wal"
	}
	walBufMu.Unlock()
	return sqlite3.SQLITE_OK
}

// walBufTable returns the io methods that wrap pm: for a WAL, pm's own but
// for the calls that write, read, size, sync or close the file; for a
// database file, pm's own but for the shared-memory lock and close.
func walBufTable(tls *libc.TLS, pm uintptr, wal bool) (uintptr, error) {
	key := [2]uintptr{pm, 0}
	if wal {
		key[1] = 1
	}
	walBufMu.Lock()
	defer walBufMu.Unlock()
	if t, ok := walBufMethods[key]; ok {
		return t, nil
	}
	t, err := cAlloc(tls, int(unsafe.Sizeof(sqlite3.Tsqlite3_io_methods{})))
	if err != nil {
		return 0, err
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cptr(t))
	*m = *(*sqlite3.Tsqlite3_io_methods)(cptr(pm))
	if wal {
		*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = walBufClose
		*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxRead)) = walBufRead
		*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxWrite)) = walBufWrite
		*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&m.FxTruncate)) = walBufTruncate
		*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&m.FxSync)) = walBufSync
		*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&m.FxFileSize)) = walBufFileSize
	} else {
		*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = walBufDBClose
		*(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&m.FxShmLock)) = walBufShmLock
	}
	walBufMethods[key] = t
	return t, nil
}

// walWriteLock is the WAL's write lock among the shared-memory locks
// (SQLite's WAL_WRITE_LOCK).
const walWriteLock = 0

// walBufShmLock follows the database file's shared-memory locks: when the
// connection releases the WAL's write lock, its transaction has ended,
// and what its WAL still gathers was never committed (a commit's sync
// wrote everything out): it is dropped.
func walBufShmLock(tls *libc.TLS, f uintptr, ofst, n, flags int32) int32 {
	rc := (*(*func(*libc.TLS, uintptr, int32, int32, int32) int32)(unsafe.Pointer(&struct{ uintptr }{walState(f).base().FxShmLock})))(tls, f, ofst, n, flags)
	if flags == sqlite3.SQLITE_SHM_UNLOCK|sqlite3.SQLITE_SHM_EXCLUSIVE && ofst <= walWriteLock && walWriteLock < ofst+n {
		walBufMu.Lock()
		// Every WAL of that name: at most one connection holds the
		// write lock, so no other one gathers anything but the leftovers
		// of its own rollback, which went at its own release.
		for w := range walBufWALs[walBufNames[f]] {
			if s := walState(w); s.end != s.start {
				s.start, s.end = 0, 0
			}
		}
		walBufMu.Unlock()
	}
	return rc
}

func walBufDBClose(tls *libc.TLS, f uintptr) int32 {
	walBufMu.Lock()
	delete(walBufNames, f)
	walBufMu.Unlock()
	return (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{walState(f).base().FxClose})))(tls, f)
}

func (w *walFile) base() *sqlite3.Tsqlite3_io_methods {
	return (*sqlite3.Tsqlite3_io_methods)(cptr(w.methods))
}

// flush writes the gathered bytes to the file, in pieces of
// walWriteMax: the unix VFS writes at most 128 KiB - 1 bytes per call and
// takes a call that writes nothing for a full disk. After a failure what
// was not written stays gathered: SQLite was told those writes succeeded.
func (w *walFile) flush(tls *libc.TLS, f uintptr) int32 {
	for done := int64(0); w.start+done < w.end; {
		n := min(w.end-w.start-done, walWriteMax)
		if rc := baseWrite(w.base().FxWrite, tls, f, w.buf+uintptr(done), int32(n), w.start+done); rc != sqlite3.SQLITE_OK {
			buf := unsafe.Slice((*byte)(cptr(w.buf)), walBufCap)
			copy(buf, buf[done:w.end-w.start])
			w.start += done
			return rc
		}
		done += n
	}
	w.start, w.end = 0, 0
	return sqlite3.SQLITE_OK
}

func baseWrite(fp uintptr, tls *libc.TLS, f, buf uintptr, n int32, off int64) int32 {
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&struct{ uintptr }{fp})))(tls, f, buf, n, off)
}

// walBufWrite gathers a write that continues (or lies within) what is
// gathered; anything else first writes out what is gathered.
func walBufWrite(tls *libc.TLS, f, src uintptr, n int32, off int64) int32 {
	w := walState(f)
	if w.buf == 0 {
		w.buf = libc.Xmalloc(tls, walBufCap)
		if w.buf == 0 {
			return baseWrite(w.base().FxWrite, tls, f, src, n, off)
		}
	}
	empty := w.end == w.start
	if !empty && (off < w.start || off > w.end || off+int64(n)-w.start > walBufCap) {
		if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
			return rc
		}
		empty = true
	}
	if int64(n) > walBufCap {
		return baseWrite(w.base().FxWrite, tls, f, src, n, off)
	}
	if empty {
		w.start, w.end = off, off
	}
	dst := unsafe.Slice((*byte)(cptr(w.buf)), walBufCap)[off-w.start:]
	copy(dst, unsafe.Slice((*byte)(cptr(src)), n))
	w.end = max(w.end, off+int64(n))
	return sqlite3.SQLITE_OK
}

func walBufRead(tls *libc.TLS, f, dst uintptr, n int32, off int64) int32 {
	w := walState(f)
	if w.end != w.start && off < w.end && off+int64(n) > w.start {
		if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&struct{ uintptr }{w.base().FxRead})))(tls, f, dst, n, off)
}

func walBufSync(tls *libc.TLS, f uintptr, flags int32) int32 {
	w := walState(f)
	if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&struct{ uintptr }{w.base().FxSync})))(tls, f, flags)
}

func walBufTruncate(tls *libc.TLS, f uintptr, size int64) int32 {
	w := walState(f)
	if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&struct{ uintptr }{w.base().FxTruncate})))(tls, f, size)
}

func walBufFileSize(tls *libc.TLS, f, pSize uintptr) int32 {
	w := walState(f)
	if rc := w.flush(tls, f); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return (*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{w.base().FxFileSize})))(tls, f, pSize)
}

func walBufClose(tls *libc.TLS, f uintptr) int32 {
	walBufMu.Lock()
	name := walBufNames[f]
	delete(walBufWALs[name], f)
	if len(walBufWALs[name]) == 0 {
		delete(walBufWALs, name)
	}
	delete(walBufNames, f)
	walBufMu.Unlock()
	w := walState(f)
	rc := w.flush(tls, f)
	if w.buf != 0 {
		libc.Xfree(tls, w.buf)
		w.buf = 0
	}
	if rc2 := (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{w.base().FxClose})))(tls, f); rc == sqlite3.SQLITE_OK {
		rc = rc2
	}
	return rc
}
