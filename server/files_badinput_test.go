package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestFileBadInput: each bad upload or request gets a clear error, and
// nothing half-written stays on disk.
func TestFileBadInput(t *testing.T) {
	ts := newServer(t, func(c *testConfig) { c.files.MaxFileBytes = 4096 })
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob)
	dir := ts.files.Blobs().Dir()

	t.Run("over the limit", func(t *testing.T) {
		alice.upload(t, "big.bin", "application/octet-stream", make([]byte, 4097)).wantError(t, http.StatusRequestEntityTooLarge, "too_large")
		// Without a Content-Length the limit is found while streaming.
		r, err := alice.uploadErr("big.bin", "", io.MultiReader(bytes.NewReader(make([]byte, 4097))), -1)
		if err != nil {
			t.Fatal(err)
		}
		r.wantError(t, http.StatusRequestEntityTooLarge, "too_large")
		wantNoTrace(t, dir)
	})
	t.Run("zero bytes", func(t *testing.T) {
		alice.upload(t, "empty.txt", "text/plain", nil).wantError(t, http.StatusBadRequest, "bad_request")
		wantNoTrace(t, dir)
	})
	t.Run("names", func(t *testing.T) {
		long := strings.Repeat("é", 500) + ".txt" // 1,000 characters before the extension's
		for name, want := range map[string]string{
			"../../etc/passwd":      "passwd",
			`..\..\boot.ini`:        "boot.ini",
			"a\x00b.txt":            "ab.txt",
			"evil\u202egnp.exe":     "evilgnp.exe",
			"\u2067x\u2069.txt":     "x.txt",
			"line\nbreak.txt":       "line break.txt",
			"..":                    "file",
			"":                      "file",
			"\x01\x02":              "file",
			long:                    strings.Repeat("é", 125) + ".txt",
			"bad utf8 \xff\xfe.txt": "bad utf8 .txt",
		} {
			f := alice.uploadFile(t, name, "text/plain", []byte("named "+name))
			if f.Name != want {
				t.Errorf("name %q: got %q, want %q", name, f.Name, want)
			}
			if len(f.Name) > 255 {
				t.Errorf("name %q: %d bytes", name, len(f.Name))
			}
		}
	})
	t.Run("lying content type", func(t *testing.T) {
		html := []byte("<!DOCTYPE html><html><script>alert(document.cookie)</script></html>")
		f := alice.uploadFile(t, "cat.png", "image/png", html)
		if f.Mime != "text/html" || f.ThumbURL != "" || f.Width != 0 {
			t.Fatalf("an HTML page sent as image/png: %+v", f)
		}
		r := ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token).want(t, http.StatusOK)
		if ct, cd := r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment;") {
			t.Fatalf("served as %q, %q", ct, cd)
		}
		ts.fetch(t, "/api/v1/files/"+f.ID+"/thumb", alice.Token).wantError(t, http.StatusNotFound, "not_found")
		svg := alice.uploadFile(t, "x.svg", "image/svg+xml", []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>`))
		r = ts.fetch(t, "/api/v1/files/"+svg.ID, alice.Token).want(t, http.StatusOK)
		if ct, cd := r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment;") || r.Header.Get("Content-Security-Policy") != "sandbox" {
			t.Fatalf("SVG served as %q, %q", ct, cd)
		}
		// A real PNG declared as something else is still an image.
		img := alice.uploadFile(t, "shot", "application/octet-stream", pngImage(t, 8, 8))
		if img.Mime != "image/png" || img.Width != 8 {
			t.Fatalf("an undeclared PNG: %+v", img)
		}
	})
	t.Run("truncated upload", func(t *testing.T) {
		c, err := net.Dial("tcp", ts.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /api/v1/files?name=cut.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 3000\r\n\r\n%s", alice.Token, strings.Repeat("x", 1000))
		time.Sleep(50 * time.Millisecond)
		c.Close()
		deadline := time.Now().Add(waitTimeout)
		for !noTrace(dir) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		wantNoTrace(t, dir)
	})
	t.Run("attachments", func(t *testing.T) {
		mine := alice.uploadFile(t, "a.txt", "text/plain", []byte("alice's"))
		bobs := bob.uploadFile(t, "b.txt", "text/plain", []byte("bob's"))
		alice.sendFiles(t, conv.ID, "x1", "", bobs.ID).wantError(t, http.StatusNotFound, "not_found")
		alice.sendFiles(t, conv.ID, "x2", "", "nosuchfile").wantError(t, http.StatusNotFound, "not_found")
		ts.fetch(t, "/api/v1/files/nosuchfile", alice.Token).wantError(t, http.StatusNotFound, "not_found")
		ids := make([]string, 11)
		for i := range ids {
			ids[i] = alice.uploadFile(t, fmt.Sprintf("f%d", i), "text/plain", []byte(fmt.Sprint("file ", i))).ID
		}
		alice.sendFiles(t, conv.ID, "x3", "", ids...).wantError(t, http.StatusBadRequest, "bad_request")
		alice.sendFiles(t, conv.ID, "x4", "", mine.ID, mine.ID).wantError(t, http.StatusBadRequest, "bad_request")
		alice.post(t, convPath(conv.ID, "messages"), map[string]any{"client_msg_id": "x5", "body": ""}).wantError(t, http.StatusBadRequest, "bad_request")
		// Nothing of the refused sends was stored; ten attachments are fine.
		if got := alice.all(t, conv.ID); len(got) != 0 {
			t.Fatalf("refused sends stored %d messages", len(got))
		}
		alice.sendFiles(t, conv.ID, "x6", "", ids[:10]...).want(t, http.StatusCreated)
	})
	t.Run("decompression bomb", func(t *testing.T) {
		ts := newServer(t)
		alice := ts.register(t, "alice")
		bomb := pngBomb(t, 20000, 20000)
		f := alice.uploadFile(t, "bomb.png", "image/png", bomb)
		if f.Width != 20000 || f.Height != 20000 || f.ThumbURL != "" {
			t.Fatalf("bomb: %+v", f)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r := ts.fetch(t, "/api/v1/files/"+f.ID+"/thumb", alice.Token).wantError(t, http.StatusBadRequest, "bad_request")
		runtime.ReadMemStats(&after)
		if !strings.Contains(r.String(), "20000×20000") {
			t.Errorf("unclear refusal: %s", r)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
			t.Errorf("refusing the bomb allocated %d MiB", d>>20)
		}
	})
	t.Run("range past the end", func(t *testing.T) {
		f := alice.uploadFile(t, "r.txt", "text/plain", []byte("0123456789"))
		// Refusals in the protocol's JSON, with the size in Content-Range.
		for _, rng := range []string{"bytes=100-200", "bytes=-0"} {
			r := ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token, "Range", rng).wantError(t, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable")
			if cr := r.Header.Get("Content-Range"); cr != "bytes */10" {
				t.Errorf("Range %s: Content-Range %q, want bytes */10", rng, cr)
			}
		}
		r := ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token, "Range", "bytes=5-100").want(t, http.StatusPartialContent)
		if string(r.Body) != "56789" {
			t.Fatalf("range to past the end: %q", r.Body)
		}
		// Beside a satisfiable range, or under a condition, -0 does not
		// refuse the request (RFC 9110 14.1.1, 13.2.2).
		ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token, "Range", "bytes=0-1,-0").want(t, http.StatusPartialContent)
		etag := r.Header.Get("ETag")
		ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token, "Range", "bytes=-0", "If-None-Match", etag).want(t, http.StatusNotModified)
		// A unit other than bytes is ignored (RFC 9110): the whole file.
		if r := ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token, "Range", "items=0-1").want(t, http.StatusOK); string(r.Body) != "0123456789" {
			t.Errorf("Range items=0-1: %q, want the whole file", r.Body)
		}
	})
	t.Run("long declared type", func(t *testing.T) {
		// Stored and sent with every message attaching the file: a
		// declared type past 255 bytes is not kept (the bytes decide).
		f := alice.uploadFile(t, "t.txt", "application/x-"+strings.Repeat("a", 100000), []byte("plain words"))
		if len(f.Mime) > 255 || !strings.HasPrefix(f.Mime, "text/plain") {
			t.Errorf("mime %.80q (%d bytes), want the sniffed text/plain", f.Mime, len(f.Mime))
		}
	})
	t.Run("quota", func(t *testing.T) {
		ts := newServer(t, func(c *testConfig) { c.files.MaxTotalBytes = 1000 })
		alice := ts.register(t, "alice")
		alice.uploadFile(t, "a", "", make([]byte, 600))
		alice.upload(t, "b", "", bytes.Repeat([]byte{1}, 600)).wantError(t, http.StatusInsufficientStorage, "insufficient_storage")
		wantNoTrace(t, ts.files.Blobs().Dir())
		// Bytes stored already get the same answer: a full store does not
		// confirm that someone holds a given document.
		ts.register(t, "bob").upload(t, "again", "", make([]byte, 600)).wantError(t, http.StatusInsufficientStorage, "insufficient_storage")
		wantNoTrace(t, ts.files.Blobs().Dir())
	})
}

// noTrace: no upload in progress or refused left a temp file.
func noTrace(dir string) bool {
	ents, err := os.ReadDir(filepath.Join(dir, "tmp"))
	return err == nil && len(ents) == 0
}

func wantNoTrace(t *testing.T, dir string) {
	t.Helper()
	if !noTrace(dir) {
		ents, _ := os.ReadDir(filepath.Join(dir, "tmp"))
		t.Fatalf("temp files left: %v", ents)
	}
}

// TestUploadMemory: a 25 MiB upload and its download cost far less than
// 25 MiB of allocations: the body streams to and from disk.
func TestUploadMemory(t *testing.T) {
	ts := newServer(t)
	alice := ts.register(t, "alice")
	const size = 25 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := alice.uploadErr("big.bin", "application/octet-stream", io.LimitReader(patternReader{}, size), size)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	r.want(t, http.StatusCreated)
	up := after.TotalAlloc - before.TotalAlloc
	var f struct {
		File fileJSON `json:"file"`
	}
	r.decode(t, &f)

	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/files/"+f.File.ID, nil)
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := ts.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	runtime.ReadMemStats(&after)
	if err != nil || n != size {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	down := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated for a %d MiB file: upload %d KiB, download %d KiB (client and server)", size>>20, up>>10, down>>10)
	if up > 4<<20 || down > 4<<20 {
		t.Fatalf("a %d MiB file allocated %d KiB to upload and %d KiB to download: it is being held in memory", size>>20, up>>10, down>>10)
	}
}

// patternReader yields bytes that do not repeat within a buffer.
type patternReader struct{}

func (patternReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return len(p), nil
}
