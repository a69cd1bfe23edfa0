package server

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/files"
)

// handleUpload stores the request body as a file: streamed to disk, never
// held in memory whole.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	f := s.cfg.Files
	if f == nil {
		s.writeError(w, r, chat.Errorf(chat.ENotFound, "file uploads are not enabled"))
		return
	}
	limit := f.opts.MaxFileBytes
	if r.ContentLength > limit {
		// Refused before reading: the client learns it at once.
		w.Header().Set("Connection", "close")
		s.writeError(w, r, chat.Errorf(chat.ETooLarge, "file is over %d bytes", limit))
		return
	}
	name := files.SanitizeName(r.URL.Query().Get("name"))
	// The body, however large, has http.read_timeout to arrive, as every
	// request's (PROTOCOL.md v1.2): a transfer that trickles is cut too.
	u, err := f.blobs.Write(r.Body, limit)
	// The answer gets its own write deadline: the one set when the request
	// came may have run out while a large body arrived.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.APIWriteTimeout))
	if err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = chat.Errorf(chat.EBadRequest, "the file did not arrive within %s (http.read_timeout)", s.cfg.ReadTimeout)
		case errors.Is(err, files.ErrTooLarge):
			w.Header().Set("Connection", "close")
			err = chat.Errorf(chat.ETooLarge, "file is over %d bytes", limit)
		case errors.Is(err, files.ErrEmpty):
			err = chat.Errorf(chat.EBadRequest, "file is empty")
		case errors.Is(err, files.ErrQuota):
			w.Header().Set("Connection", "close")
			err = chat.Errorf(chat.EInsufficientStorage, "the server's file storage is full")
		case errors.Is(err, files.ErrIncomplete):
			err = chat.Errorf(chat.EBadRequest, "upload incomplete: the body ended early")
		default:
			err = diskFailure(err)
		}
		s.writeError(w, r, err)
		return
	}
	rec := chat.FileRecord{
		File: chat.File{
			ID:   chat.NewID(),
			Name: name,
			Size: u.Size,
			Mime: files.DetectType(r.Header.Get("Content-Type"), u.Sniffed),
		},
		Uploader:  userOf(r).ID,
		SHA256:    u.SHA256,
		CreatedAt: time.Now().UnixMilli(),
	}
	if files.Previewable(rec.Mime) && u.Format != "" {
		rec.Width, rec.Height = u.Width, u.Height
	}
	if err := f.blobs.Keep(r.Context(), u, func() error { return f.meta.CreateFile(r.Context(), rec) }); err != nil {
		s.writeError(w, r, diskFailure(err))
		return
	}
	f.uploads.Inc()
	f.uploadBytes.Add(float64(u.Size))
	f.links.Link(&rec.File)
	writeJSON(w, http.StatusCreated, map[string]any{"file": rec.File})
}

// fileOf returns the file a GET names, if the caller may have it: through
// the Authorization header of a user who uploaded it or can see a message
// attaching it, or else a valid signed link (exp, sig). A link stands in
// for the header, so a header, when there is one, decides. Users without
// access get 404 (existence is not revealed); a link that is altered or
// expired, like a bad token, 401.
func (s *Server) fileOf(w http.ResponseWriter, r *http.Request, thumb bool) (chat.FileRecord, bool) {
	f := s.cfg.Files
	if f == nil {
		s.writeError(w, r, chat.Errorf(chat.ENotFound, "file not found"))
		return chat.FileRecord{}, false
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	var rec chat.FileRecord
	var err error
	if tok := bearer(r, false); tok == "" && q.Has("sig") {
		if !f.links.Verify(id, thumb, q.Get("exp"), q.Get("sig")) {
			s.writeError(w, r, chat.Errorf(chat.EUnauthorized, "the link is invalid or has expired: pull the message again for a fresh one"))
			return rec, false
		}
		rec, err = f.meta.FileByID(r.Context(), id)
	} else {
		var u chat.User
		if u, err = s.chat.Authenticate(r.Context(), tok); err == nil {
			rec, err = f.meta.FileFor(r.Context(), id, u.ID)
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return rec, false
	}
	return rec, true
}

// fileHeaders are on every file response: no sniffing into another type,
// and a sandbox so that even a document the browser renders runs nothing
// with the site's origin.
func fileHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Cache-Control", "private, max-age=3600")
}

func (s *Server) handleFile(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.fileOf(w, r, false)
	if !ok {
		return
	}
	fh, err := s.cfg.Files.blobs.Open(rec.SHA256)
	if err != nil {
		s.fileGone(w, r, err)
		return
	}
	defer fh.Close()
	var head [512]byte
	n, _ := fh.ReadAt(head[:], 0)
	inline := files.Inline(rec.Mime, http.DetectContentType(head[:n]))
	h := w.Header()
	fileHeaders(h)
	h.Set("ETag", `"`+rec.SHA256+`"`)
	h.Set("Content-Type", servedType(rec.Mime, inline))
	h.Set("Content-Disposition", disposition(inline, rec.Name))
	serveRanged(w, r, rec.Size, func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.UnixMilli(rec.CreatedAt), idleFile{fh, http.NewResponseController(w)})
	})
}

func (s *Server) handleThumb(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.fileOf(w, r, true)
	if !ok {
		return
	}
	t := s.cfg.Files.thumbs
	if !files.Previewable(rec.Mime) {
		s.writeError(w, r, chat.Errorf(chat.ENotFound, "%s files have no thumbnail", rec.Mime))
		return
	}
	if !t.Fits(rec.Width, rec.Height) {
		s.writeError(w, r, chat.Errorf(chat.EBadRequest, "the image is %d×%d pixels: previews are made of images up to %d pixels", rec.Width, rec.Height, t.MaxPixels()))
		return
	}
	path, ctype, err := t.Thumb(r.Context(), rec.SHA256)
	if err != nil {
		switch {
		case errors.Is(err, files.ErrTooManyPixels), errors.Is(err, files.ErrNoPreview):
			s.writeError(w, r, chat.Errorf(chat.EBadRequest, "no preview: %v", err))
		default:
			// A thumbnail is written once, on the first request: a full
			// disk makes that a 503 to retry, not an internal error.
			s.fileGone(w, r, diskFailure(err))
		}
		return
	}
	fh, err := os.Open(path)
	if err != nil {
		s.fileGone(w, r, err)
		return
	}
	defer fh.Close()
	h := w.Header()
	fileHeaders(h)
	h.Set("ETag", `"`+rec.SHA256+`-thumb"`)
	h.Set("Content-Type", ctype)
	h.Set("Content-Disposition", disposition(true, "thumb-"+rec.Name))
	st, err := fh.Stat()
	if err != nil {
		s.fileGone(w, r, err)
		return
	}
	serveRanged(w, r, st.Size(), func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.UnixMilli(rec.CreatedAt), fh)
	})
}

// fileGone answers a file whose row exists but whose bytes do not (it is
// being removed): as if there were none.
func (s *Server) fileGone(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, os.ErrNotExist) {
		s.writeError(w, r, chat.Errorf(chat.ENotFound, "file not found"))
		return
	}
	s.writeError(w, r, fmt.Errorf("serving a file: %w", err))
}

// servedType is the Content-Type of a file response. Types a browser runs
// script in are sent as bytes; with nosniff and attachment that is what
// they stay.
func servedType(t string, inline bool) string {
	if inline {
		return t
	}
	if _, _, err := mime.ParseMediaType(t); err != nil {
		return "application/octet-stream"
	}
	for _, active := range []string{"html", "xml", "svg", "javascript", "ecmascript", "xhtml"} {
		if strings.Contains(t, active) {
			return "application/octet-stream"
		}
	}
	return t
}

// disposition is a Content-Disposition with the name in both forms: an
// ASCII fallback and RFC 5987's UTF-8 filename*.
func disposition(inline bool, name string) string {
	kind := "attachment"
	if inline {
		kind = "inline"
	}
	var ascii strings.Builder
	for _, c := range name {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '%' {
			ascii.WriteByte('_')
		} else {
			ascii.WriteRune(c)
		}
	}
	return fmt.Sprintf(`%s; filename="%s"; filename*=UTF-8''%s`, kind, ascii.String(), rfc5987(name))
}

// rfc5987 percent-encodes every byte that is not an attr-char.
func rfc5987(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// fileIdleTimeout bounds how long a download may stall. A whole request's
// deadline would cut a 25 MiB download to a slow link that is still making
// progress; each write of the file moves the deadline instead, so only a
// transfer that stops is cut. (Uploads are not so: the protocol cuts any
// request body that has not arrived within http.read_timeout.)
const fileIdleTimeout = 30 * time.Second

// idleFile is a file being served: ServeContent writes what it reads, so
// each read moves the write deadline.
type idleFile struct {
	f  *os.File
	rc *http.ResponseController
}

func (f idleFile) Read(p []byte) (int, error) {
	f.rc.SetWriteDeadline(time.Now().Add(fileIdleTimeout))
	return f.f.Read(p)
}

func (f idleFile) Seek(offset int64, whence int) (int64, error) { return f.f.Seek(offset, whence) }

// diskFailure turns a failure of the disk that holds the files (full,
// read-only, I/O error) into unavailable with Retry-After, as PROTOCOL.md
// v1.2 asks of every write the server cannot store ("never internal"); the
// upload works again once the disk does. Other errors are returned as they are.
func diskFailure(err error) error {
	var why string
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		why = "disk full"
	case errors.Is(err, syscall.EROFS):
		why = "read-only"
	case errors.Is(err, syscall.EIO):
		why = "I/O error"
	default:
		return err
	}
	return &chat.Error{Code: chat.EUnavailable, Message: "the server cannot store files now (" + why + "); retry later", RetryAfterMS: 5000}
}
