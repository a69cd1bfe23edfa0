package server_test

import (
	"bytes"
	"image"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// newNodeOn starts another server on the database at path (a second node
// of the same PostgreSQL), stopped when the test ends.
func newNodeOn(t *testing.T, path string, opts ...func(*testConfig)) *testServer {
	t.Helper()
	cfg := testConfig{chat: chat.Config{RegistrationOpen: true, AckFlushInterval: 50 * time.Millisecond, ReceiptInterval: 50 * time.Millisecond}}
	for _, o := range opts {
		o(&cfg)
	}
	ts := &testServer{t: t, cfg: cfg, path: path, http: &http.Client{Timeout: waitTimeout, Transport: &http.Transport{}}, logs: &syncBuffer{}}
	ts.start()
	t.Cleanup(func() {
		ts.stop()
		ts.http.CloseIdleConnections()
		if t.Failed() {
			t.Logf("node log:\n%s", ts.logs.String())
		}
	})
	return ts
}

// TestFilesTwoNodesSharedDir: two nodes on one PostgreSQL and one shared
// files directory (docs/scaling.md). A file uploaded through node A is
// attached through node B, downloaded and thumbnailed through both, and
// its signed links, made on one node, open on the other (the signing key
// is a setting in the database). Deleting the message through B erases
// the bytes A wrote.
func TestFilesTwoNodesSharedDir(t *testing.T) {
	if testPG == nil {
		t.Skip("two nodes share a PostgreSQL: run with IMSERVER_TEST_STORE=postgres (make test does)")
	}
	shared := filepath.Join(t.TempDir(), "files")
	dir := func(c *testConfig) { c.files.Dir = shared }
	a := newServer(t, dir)
	b := newNodeOn(t, a.path, dir)

	alice, bob := a.register(t, "alice"), a.register(t, "bob")
	img := pngImage(t, 640, 480)
	f := alice.uploadFile(t, "cat.png", "image/png", img)

	// The same accounts through node B.
	aliceB, bobB := &account{ts: b, User: alice.User, Token: alice.Token}, &account{ts: b, User: bob.User, Token: bob.Token}
	conv := aliceB.direct(t, bobB)
	var sent struct {
		Message fileMessageJSON `json:"message"`
	}
	aliceB.sendFiles(t, conv.ID, "att-1", "through b", f.ID).want(t, http.StatusCreated).decode(t, &sent)
	if len(sent.Message.Attachments) != 1 || sent.Message.Attachments[0].ID != f.ID {
		t.Fatalf("sent through b: %+v", sent.Message)
	}
	var page struct {
		Messages []fileMessageJSON `json:"messages"`
	}
	bob.get(t, convPath(conv.ID, "messages")+"?after_seq=0").want(t, http.StatusOK).decode(t, &page)
	if len(page.Messages) != 1 || len(page.Messages[0].Attachments) != 1 || page.Messages[0].Attachments[0].ThumbURL == "" {
		t.Fatalf("pulled through a: %+v", page)
	}
	for _, node := range []*testServer{a, b} {
		got := node.fetch(t, "/api/v1/files/"+f.ID, bob.Token).want(t, http.StatusOK)
		if !bytes.Equal(got.Body, img) {
			t.Fatalf("%s: bob got %d bytes, want the %d uploaded", node.URL, len(got.Body), len(img))
		}
	}
	// Links signed by B (the send's answer) open on A, and A's on B.
	linkB := sent.Message.Attachments[0]
	linkA := page.Messages[0].Attachments[0]
	for _, c := range []struct {
		node *testServer
		path string
	}{{b, linkB.ThumbURL}, {a, linkB.ThumbURL}, {b, linkA.ThumbURL}} {
		th := c.node.fetch(t, c.path, "").want(t, http.StatusOK)
		cfg, _, err := image.DecodeConfig(bytes.NewReader(th.Body))
		if err != nil || cfg.Width != 400 || cfg.Height != 300 {
			t.Fatalf("thumbnail through %s: %v %+v", c.node.URL, err, cfg)
		}
	}
	if got := a.fetch(t, linkB.URL, ""); got.Status != http.StatusOK || !bytes.Equal(got.Body, img) {
		t.Fatalf("b's signed link on a: %d, %d bytes", got.Status, len(got.Body))
	}

	// The delete through B erases the bytes on the shared directory, and
	// neither node serves the file any more.
	if n := countBlobs(t, a.files.Blobs().Dir()); n != 1 {
		t.Fatalf("%d contents in the shared directory, want 1", n)
	}
	aliceB.remove(t, conv.ID, sent.Message.Seq)
	for _, node := range []*testServer{a, b} {
		node.fetch(t, "/api/v1/files/"+f.ID, bob.Token).wantError(t, http.StatusNotFound, "not_found")
	}
	if n := countBlobs(t, b.files.Blobs().Dir()); n != 0 {
		t.Errorf("%d contents left in the shared directory after the delete", n)
	}
}
