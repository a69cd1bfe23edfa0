package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/server"
)

// TestFileAttachAndServe: an image is uploaded, attached to a message,
// seen by the other member live and by pulls, and served with the safe
// headers, by token and by signed link; a stranger gets 404.
func TestFileAttachAndServe(t *testing.T) {
	ts := newServer(t)
	alice, bob, eve := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "eve")
	img := pngImage(t, 640, 480)
	f := alice.uploadFile(t, "cat.png", "image/png", img)
	if f.Name != "cat.png" || f.Size != int64(len(img)) || f.Mime != "image/png" || f.Width != 640 || f.Height != 480 {
		t.Fatalf("file object: %+v", f)
	}
	if !strings.Contains(f.URL, "sig=") || !strings.Contains(f.ThumbURL, "/thumb?") {
		t.Fatalf("links: %+v", f)
	}
	// Before any message attaches it, only the uploader has it.
	ts.fetch(t, "/api/v1/files/"+f.ID, alice.Token).want(t, http.StatusOK)
	ts.fetch(t, "/api/v1/files/"+f.ID, bob.Token).wantError(t, http.StatusNotFound, "not_found")

	conv := alice.direct(t, bob)
	ws := bob.dial(t, "bob")
	r := alice.sendFiles(t, conv.ID, "m1", "", f.ID).want(t, http.StatusCreated)
	var sent struct {
		Message fileMessageJSON `json:"message"`
	}
	r.decode(t, &sent)
	if len(sent.Message.Attachments) != 1 || sent.Message.Attachments[0].ID != f.ID || sent.Message.Attachments[0].URL == "" {
		t.Fatalf("sent message attachments: %s", r)
	}
	var live [1]fileMessageJSON
	if err := json.Unmarshal(ws.next(t, "msg", ofType("msg")).RawMessage, &live[0]); err != nil {
		t.Fatal(err)
	}
	if len(live[0].Attachments) != 1 || live[0].Attachments[0].ID != f.ID || live[0].Attachments[0].ThumbURL == "" {
		t.Fatalf("live message attachments: %+v", live[0])
	}
	var page struct {
		Messages []fileMessageJSON `json:"messages"`
	}
	bob.get(t, convPath(conv.ID, "messages")+"?after_seq=0").want(t, http.StatusOK).decode(t, &page)
	if len(page.Messages) != 1 || len(page.Messages[0].Attachments) != 1 || page.Messages[0].Attachments[0].Width != 640 {
		t.Fatalf("pulled page: %+v", page)
	}
	// A retry gets the same message and attachments.
	r = alice.sendFiles(t, conv.ID, "m1", "", f.ID).want(t, http.StatusOK)
	var dup struct {
		Message   fileMessageJSON `json:"message"`
		Duplicate bool            `json:"duplicate"`
	}
	r.decode(t, &dup)
	if !dup.Duplicate || dup.Message.Seq != sent.Message.Seq || len(dup.Message.Attachments) != 1 || dup.Message.Attachments[0].ID != f.ID {
		t.Fatalf("retry: %s", r)
	}

	got := ts.fetch(t, "/api/v1/files/"+f.ID, bob.Token).want(t, http.StatusOK)
	if !bytes.Equal(got.Body, img) {
		t.Fatalf("bob got %d bytes, want the %d uploaded", len(got.Body), len(img))
	}
	for k, want := range map[string]string{
		"Content-Type":            "image/png",
		"X-Content-Type-Options":  "nosniff",
		"Content-Security-Policy": "sandbox",
		"Content-Disposition":     `inline; filename="cat.png"; filename*=UTF-8''cat.png`,
	} {
		if g := got.Header.Get(k); g != want {
			t.Errorf("%s: got %q, want %q", k, g, want)
		}
	}
	etag := got.Header.Get("ETag")
	ts.fetch(t, "/api/v1/files/"+f.ID, bob.Token, "If-None-Match", etag).want(t, http.StatusNotModified)
	part := ts.fetch(t, "/api/v1/files/"+f.ID, bob.Token, "Range", "bytes=10-19").want(t, http.StatusPartialContent)
	if !bytes.Equal(part.Body, img[10:20]) {
		t.Fatalf("range: got %q", part.Body)
	}
	ts.fetch(t, "/api/v1/files/"+f.ID, eve.Token).wantError(t, http.StatusNotFound, "not_found")
	ts.fetch(t, "/api/v1/files/"+f.ID, "").wantError(t, http.StatusUnauthorized, "unauthorized")

	// Signed links work without a token, for that file and that kind only.
	link := live[0].Attachments[0]
	if got := ts.fetch(t, link.URL, ""); got.Status != http.StatusOK || !bytes.Equal(got.Body, img) {
		t.Fatalf("signed link: %d, %d bytes", got.Status, len(got.Body))
	}
	th := ts.fetch(t, link.ThumbURL, "").want(t, http.StatusOK)
	if th.Header.Get("Content-Security-Policy") != "sandbox" || th.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("thumbnail headers: %v", th.Header)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(th.Body))
	if err != nil || cfg.Width != 400 || cfg.Height != 300 {
		t.Fatalf("thumbnail: %v %+v", err, cfg)
	}
	// The thumbnail's link does not open the file, nor another file's.
	// A link that does not open what it names is a bad credential: 401.
	ts.fetch(t, strings.Replace(link.ThumbURL, "/thumb?", "?", 1), "").wantError(t, http.StatusUnauthorized, "unauthorized")
	other := alice.uploadFile(t, "other.png", "image/png", pngImage(t, 10, 10))
	ts.fetch(t, strings.Replace(link.URL, f.ID, other.ID, 1), "").wantError(t, http.StatusUnauthorized, "unauthorized")
	bad := strings.Replace(link.URL, "sig=", "sig=x", 1)
	ts.fetch(t, bad, "").wantError(t, http.StatusUnauthorized, "unauthorized")
	expired := strings.Replace(link.URL, "exp=", "exp=1", 1)
	ts.fetch(t, expired, "").wantError(t, http.StatusUnauthorized, "unauthorized")
	// With a header, the header decides: the link is not looked at.
	if got := ts.fetch(t, bad, bob.Token); got.Status != http.StatusOK || !bytes.Equal(got.Body, img) {
		t.Fatalf("a bad link beside bob's header: %d", got.Status)
	}
	ts.fetch(t, link.URL, eve.Token).wantError(t, http.StatusNotFound, "not_found")
	// A Range that cannot be parsed, like one past the end, is refused
	// with the size in Content-Range.
	for _, rng := range []string{"bytes=30-10", "bytes=abc", fmt.Sprintf("bytes=%d-", len(img))} {
		got := ts.fetch(t, "/api/v1/files/"+f.ID, bob.Token, "Range", rng)
		got.wantError(t, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable")
		if cr := got.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", len(img)) {
			t.Errorf("Range %s: Content-Range %q, want bytes */%d", rng, cr, len(img))
		}
	}
}

// TestFileVisibleRange: attachments follow the conversation's visible
// ranges: a joiner does not get files from before its join, a kicked
// member keeps those up to its bound and gets none after.
func TestFileVisibleRange(t *testing.T) {
	ts := newServer(t)
	alice, bob, carol := ts.register(t, "alice"), ts.register(t, "bob"), ts.register(t, "carol")
	g := alice.group(t, "team", bob)
	before := alice.uploadFile(t, "before.txt", "text/plain", []byte("before carol joined"))
	alice.sendFiles(t, g.ID, "a1", "see", before.ID).want(t, http.StatusCreated)
	alice.post(t, convPath(g.ID, "members"), map[string]any{"user_ids": []string{carol.ID()}}).want(t, http.StatusOK)
	ts.fetch(t, "/api/v1/files/"+before.ID, carol.Token).wantError(t, http.StatusNotFound, "not_found")
	ts.fetch(t, "/api/v1/files/"+before.ID, bob.Token).want(t, http.StatusOK)

	alice.del(t, convPath(g.ID, "members", bob.ID())).want(t, http.StatusNoContent)
	after := alice.uploadFile(t, "after.txt", "text/plain", []byte("after bob was kicked"))
	alice.sendFiles(t, g.ID, "a2", "", after.ID).want(t, http.StatusCreated)
	ts.fetch(t, "/api/v1/files/"+before.ID, bob.Token).want(t, http.StatusOK)
	ts.fetch(t, "/api/v1/files/"+after.ID, bob.Token).wantError(t, http.StatusNotFound, "not_found")
	ts.fetch(t, "/api/v1/files/"+after.ID, carol.Token).want(t, http.StatusOK)

	// Only the uploader attaches a file.
	carol.sendFiles(t, g.ID, "c1", "mine now", after.ID).wantError(t, http.StatusNotFound, "not_found")
}

// TestFileDedupAndSweep: the same bytes are kept once; uploads no message
// attached are removed after the orphan TTL, and bytes with no row (a crash
// between a commit and the removal) by the next sweep; attached files stay.
func TestFileDedupAndSweep(t *testing.T) {
	ts := newServer(t, func(c *testConfig) {
		c.files.OrphanTTL = time.Millisecond
		c.files.SweepInterval = time.Hour
	})
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	conv := alice.direct(t, bob)
	body := []byte("the same bytes, twice")
	a := alice.uploadFile(t, "a.txt", "text/plain", body)
	b := alice.uploadFile(t, "b.txt", "text/plain", body)
	if a.ID == b.ID {
		t.Fatal("two uploads got one id")
	}
	dir := ts.files.Blobs().Dir()
	if n := countBlobs(t, dir); n != 1 {
		t.Fatalf("%d blobs on disk for one content, want 1", n)
	}
	kept := alice.uploadFile(t, "kept.txt", "text/plain", []byte("attached"))
	alice.sendFiles(t, conv.ID, "k", "", kept.ID).want(t, http.StatusCreated)

	// Leftovers of a crash: bytes no row names, an upload's temp file, a
	// thumbnail of removed bytes.
	stray := filepath.Join(dir, "ab", "ab"+strings.Repeat("0", 62))
	tmp := filepath.Join(dir, "tmp", "upload-stray")
	thumb := filepath.Join(dir, "cd", "cd"+strings.Repeat("0", 62)+".thumb.png")
	for _, p := range []string{stray, tmp, thumb} {
		os.MkdirAll(filepath.Dir(p), 0o750)
		if err := os.WriteFile(p, []byte("left over"), 0o640); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-2 * time.Hour)
		os.Chtimes(p, old, old)
	}
	time.Sleep(10 * time.Millisecond)
	ts.files.Sweep(context.Background())
	for _, id := range []string{a.ID, b.ID} {
		ts.fetch(t, "/api/v1/files/"+id, alice.Token).wantError(t, http.StatusNotFound, "not_found")
	}
	ts.fetch(t, "/api/v1/files/"+kept.ID, bob.Token).want(t, http.StatusOK)
	if n := countBlobs(t, dir); n != 1 {
		t.Fatalf("%d blobs on disk after the sweep, want 1 (the attached file)", n)
	}
	for _, p := range []string{stray, tmp, thumb} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the sweep: %v", p, err)
		}
	}
	if m := ts.fetch(t, "/metrics", testMetricsToken); !strings.Contains(string(m.Body), "imserver_files_stored 1") || !strings.Contains(string(m.Body), "imserver_file_uploads_total 3") {
		t.Errorf("metrics lack the file counts:\n%s", grepLines(string(m.Body), "imserver_file"))
	}
}

func countBlobs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) != "tmp" && !strings.Contains(d.Name(), ".thumb") {
			n++
		}
		return nil
	})
	return n
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var _ = fmt.Sprint
var _ server.FilesOptions
