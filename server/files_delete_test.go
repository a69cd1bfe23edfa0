package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestDeleteErasesAttachments: deleting a message erases its attachments:
// once the delete is answered the file is gone for everyone (404), its
// bytes and thumbnail are off the disk, and a pull shows the message
// deleted with no attachments; a file another message still attaches
// stays. After a clean stop no file under the data directory holds the
// erased file's bytes or name.
func TestDeleteErasesAttachments(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	secretName := randomWord() + ".png"
	img := pngImage(t, 500, 100)
	img = append(img, []byte(randomWord())...) // bytes no other file holds
	f := alice.uploadFile(t, secretName, "image/png", img)
	shared := alice.uploadFile(t, "shared.txt", "text/plain", []byte("kept while attached "+randomWord()))

	var m1, m2 struct {
		Message fileMessageJSON `json:"message"`
	}
	alice.sendFiles(t, g.ID, "att-1", "look", f.ID, shared.ID).want(t, http.StatusCreated).decode(t, &m1)
	alice.sendFiles(t, g.ID, "att-2", "again", shared.ID).want(t, http.StatusCreated).decode(t, &m2)
	ts.fetch(t, "/api/v1/files/"+f.ID+"/thumb", bob.Token).want(t, http.StatusOK)
	dir := ts.files.Blobs().Dir()
	if n := countBlobs(t, dir); n != 2 {
		t.Fatalf("%d contents on disk, want 2", n)
	}

	alice.remove(t, g.ID, m1.Message.Seq)
	for _, who := range []*account{alice, bob} {
		ts.fetch(t, "/api/v1/files/"+f.ID, who.Token).wantError(t, http.StatusNotFound, "not_found")
		ts.fetch(t, "/api/v1/files/"+shared.ID, who.Token).want(t, http.StatusOK)
	}
	ts.fetch(t, m1.Message.Attachments[0].URL, "").wantError(t, http.StatusNotFound, "not_found")
	if n := countBlobs(t, dir); n != 1 {
		t.Fatalf("%d contents on disk after the delete, want 1 (the shared file)", n)
	}
	var page struct {
		Messages []json.RawMessage `json:"messages"`
	}
	bob.get(t, convPath(g.ID, "messages")+"?after_seq=0").want(t, http.StatusOK).decode(t, &page)
	for _, raw := range page.Messages {
		var m struct {
			Seq         int64             `json:"seq"`
			Deleted     bool              `json:"deleted"`
			Attachments []json.RawMessage `json:"attachments"`
		}
		json.Unmarshal(raw, &m)
		switch m.Seq {
		case m1.Message.Seq:
			if !m.Deleted || m.Attachments != nil {
				t.Fatalf("the deleted message as pulled: %s", raw)
			}
		case m2.Message.Seq:
			if len(m.Attachments) != 1 {
				t.Fatalf("the other message lost its attachment: %s", raw)
			}
		}
	}

	ts.stop()
	root := filepath.Dir(ts.path) // the database and the files beside it
	if testPG != nil {
		root = ts.filesDir // what PostgreSQL keeps is not on our disk
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, img[len(img)-24:]) {
			t.Errorf("%s holds the deleted file's bytes", path)
		}
		if bytes.Contains(data, []byte(secretName)) {
			t.Errorf("%s holds the deleted file's name", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDeleteWhileUploadingSameBytes: deletes that free a content race with
// new uploads of the same bytes (the writer removes freed contents after
// its commit while uploads wait for it to record their rows). Nothing
// deadlocks, and every upload that was answered keeps its bytes.
func TestDeleteWhileUploadingSameBytes(t *testing.T) {
	ts := newServer(t)
	alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
	g := alice.group(t, "team", bob)
	body := []byte("the same bytes again and again " + randomWord())
	var wg sync.WaitGroup
	kept := make(chan string, 200)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				f := alice.uploadFile(t, "same.txt", "text/plain", body)
				var sent struct {
					Message fileMessageJSON `json:"message"`
				}
				alice.sendFiles(t, g.ID, fmt.Sprintf("race-%d-%d", w, i), "", f.ID).want(t, http.StatusCreated).decode(t, &sent)
				if i%2 == 0 {
					alice.remove(t, g.ID, sent.Message.Seq)
				} else {
					kept <- f.ID
				}
			}
		}()
	}
	wg.Wait()
	close(kept)
	for id := range kept {
		if got := ts.fetch(t, "/api/v1/files/"+id, bob.Token).want(t, http.StatusOK); !bytes.Equal(got.Body, body) {
			t.Fatalf("file %s: %q", id, got.Body)
		}
	}
}
