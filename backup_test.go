package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imserver/imserver/backup"
)

type fileObj struct {
	ID   string `json:"id"`
	Size int64  `json:"size"`
}

type backupMsg struct {
	Seq         int64     `json:"seq"`
	From        string    `json:"from"`
	ClientMsgID string    `json:"client_msg_id"`
	Body        string    `json:"body"`
	TS          int64     `json:"ts"`
	Attachments []fileObj `json:"attachments"`
}

func (p *proc) upload(t *testing.T, token, name string, body []byte) fileObj {
	t.Helper()
	req, _ := http.NewRequest("POST", p.base+"/api/v1/files?name="+name, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("upload: %v", err)
		return fileObj{}
	}
	defer res.Body.Close()
	var out struct {
		File fileObj `json:"file"`
	}
	if res.StatusCode != http.StatusCreated || json.NewDecoder(res.Body).Decode(&out) != nil {
		t.Errorf("upload: %d", res.StatusCode)
	}
	return out.File
}

func (p *proc) fileBytes(t *testing.T, token, id string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", p.base+"/api/v1/files/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET file %s: %d %s", id, res.StatusCode, b)
	}
	return b
}

func (p *proc) allMessages(t *testing.T, token, conv string) []backupMsg {
	t.Helper()
	var all []backupMsg
	after := int64(0)
	for {
		var page struct {
			Messages  []backupMsg `json:"messages"`
			Completed bool        `json:"completed"`
		}
		p.do(t, "GET", fmt.Sprintf("/api/v1/conversations/%s/messages?after_seq=%d&limit=1000", conv, after), token, nil, &page)
		all = append(all, page.Messages...)
		if page.Completed || len(page.Messages) == 0 {
			return all
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
}

// backupSource is a server with two users, a direct conversation between
// them and messages with files in it: what the backup tests back up.
type backupSource struct {
	orig       *proc
	alice, bob string // tokens
	conv       string
}

// newBackupSource registers alice and bob on orig and sends n messages,
// each with a file of its own.
func newBackupSource(t *testing.T, orig *proc, n int) *backupSource {
	t.Helper()
	var alice, bob struct {
		Token string `json:"token"`
		User  struct {
			ID string `json:"id"`
		} `json:"user"`
	}
	orig.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "alice", "password": "password123"}, &alice)
	orig.do(t, "POST", "/api/v1/auth/register", "", map[string]string{"username": "bob", "password": "password123"}, &bob)
	var d struct {
		Conversation struct {
			ID string `json:"id"`
		} `json:"conversation"`
	}
	orig.do(t, "POST", "/api/v1/conversations/direct", alice.Token, map[string]string{"user_id": bob.User.ID}, &d)
	s := &backupSource{orig: orig, alice: alice.Token, bob: bob.Token, conv: d.Conversation.ID}
	for i := range n {
		f := orig.upload(t, s.alice, fmt.Sprintf("f%d.bin", i), bytes.Repeat([]byte{byte(i), 1, 2, 3}, 1000*(i+1)))
		s.send(t, fmt.Sprint("before-", i), f.ID)
	}
	return s
}

func (s *backupSource) send(t *testing.T, id string, files ...string) {
	if code := s.orig.do(t, "POST", "/api/v1/conversations/"+s.conv+"/messages", s.alice,
		map[string]any{"client_msg_id": id, "body": "message " + id, "attachments": files}, nil); code != http.StatusCreated {
		t.Errorf("send %s: %d", id, code)
	}
}

// underLoad runs backup while three senders send (every fifth message
// with a new file), once they have sent 50, and returns its output and
// how many were sent in all.
func (s *backupSource) underLoad(t *testing.T, backup func() ([]byte, error)) ([]byte, int64) {
	t.Helper()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("load-%d-%d", w, i)
				if i%5 == 0 {
					f := s.orig.upload(t, s.alice, id+".bin", []byte("attached to "+id))
					s.send(t, id, f.ID)
				} else {
					s.send(t, id)
				}
				sent.Add(1)
			}
		}()
	}
	for sent.Load() < 50 { // let the load get going
		time.Sleep(5 * time.Millisecond)
	}
	out, err := backup()
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v\n%s", err, out)
	}
	return out, sent.Load()
}

// checkRestored compares restored with the source as bob sees them: the
// manifest's count of messages, each message and each attached file's
// bytes; it returns the messages and how many attachments they hold.
func (s *backupSource) checkRestored(t *testing.T, restored *proc, m backup.Manifest) (got []backupMsg, token string, files int) {
	t.Helper()
	var login struct {
		Token string `json:"token"`
	}
	restored.do(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": "bob", "password": "password123"}, &login)
	got = restored.allMessages(t, login.Token, s.conv)
	want := s.orig.allMessages(t, s.bob, s.conv)
	if int64(len(got)) != m.Messages {
		t.Fatalf("restored server has %d messages, the manifest %d", len(got), m.Messages)
	}
	for i, g := range got {
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(want[i])
		if !bytes.Equal(gj, wj) {
			t.Fatalf("message %d differs:\nrestored %s\noriginal %s", g.Seq, gj, wj)
		}
		for _, a := range g.Attachments {
			if !bytes.Equal(restored.fileBytes(t, login.Token, a.ID), s.orig.fileBytes(t, s.bob, a.ID)) {
				t.Fatalf("file %s differs", a.ID)
			}
			files++
		}
	}
	return got, login.Token, files
}

// TestBackupUnderLoadAndRestore backs up a server that takes sends with
// attachments meanwhile, restores the archive into a new directory, and
// checks that a server started on it serves every message the manifest
// counts, equal to the original's, with the same file bytes. A damaged
// archive restores nothing; existing data is kept without --force.
func TestBackupUnderLoadAndRestore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "orig", "im.db")
	os.MkdirAll(filepath.Dir(db), 0o750)
	cfg := writeConfig(t, dir, "limits:\n  send_rate: 100000\n  send_burst: 100000\n")
	orig := startServer(t, db, cfg)
	src := newBackupSource(t, orig, 5)
	archive := filepath.Join(dir, "backup.tar.gz")
	out, sent := src.underLoad(t, func() ([]byte, error) {
		return exec.Command(serverBin, "backup", "--db", db, archive).CombinedOutput()
	})
	if strings.Contains(string(out), "MiB of") {
		t.Errorf("progress was printed without a terminal: %s", out)
	}
	m := readManifest(t, archive)
	if m.Messages < 5 || m.Users != 2 || m.Conversations != 1 || m.Schema == 0 || m.Version == "" {
		t.Fatalf("manifest: %+v", m)
	}
	t.Logf("backed up %d messages and %d files while %d more were sent", m.Messages, m.Files, sent)

	// A damaged archive restores nothing.
	bad := filepath.Join(dir, "bad.tar.gz")
	damage(t, archive, bad)
	target := filepath.Join(dir, "restored", "im.db")
	if out, err := exec.Command(serverBin, "restore", "--db", target, bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "damaged") {
		t.Fatalf("restoring a damaged archive: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(filepath.Dir(target)); len(ents) != 0 {
		t.Fatalf("a failed restore left %v", ents)
	}

	if out, err := exec.Command(serverBin, "restore", "--db", target, archive).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	if out, err := exec.Command(serverBin, "restore", "--db", target, archive).CombinedOutput(); err == nil || !strings.Contains(string(out), "--force") {
		t.Fatalf("restore over data without --force: %v\n%s", err, out)
	}
	if out, err := exec.Command(serverBin, "restore", "--force", "--db", target, archive).CombinedOutput(); err != nil {
		t.Fatalf("restore --force: %v\n%s", err, out)
	}

	restored := startServer(t, target, cfg)
	// Not under a running server: it would go on writing to the file
	// restore replaced, and what it acknowledged would be lost.
	if out, err := exec.Command(serverBin, "restore", "--force", "--db", target, archive).CombinedOutput(); err == nil || !strings.Contains(string(out), "stop it first") {
		t.Fatalf("restore --force under a running server: %v\n%s", err, out)
	}
	_, _, files := src.checkRestored(t, restored, m)
	// Each of the 3 loaders may have had one upload in the snapshot whose
	// message was not sent yet: the manifest counts it, no message shows it.
	if int64(files) > m.Files || m.Files-int64(files) > 3 {
		t.Errorf("%d attachments restored, the manifest counts %d files", files, m.Files)
	}
	blobs := 0
	for _, e := range m.Entries {
		if strings.HasPrefix(e.Name, "files/") {
			blobs++
		}
	}
	// Every upload has bytes of its own: one content per file.
	if int64(blobs) != m.Files || len(m.Missing) != 0 {
		t.Errorf("manifest lists %d contents (missing %v) for %d files", blobs, m.Missing, m.Files)
	}
}

func readManifest(t *testing.T, archive string) backup.Manifest {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no manifest: %v", err)
		}
		if h.Name == "manifest.json" {
			var m backup.Manifest
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
}

// damage rewrites archive with one byte of the database changed, keeping
// the archive itself well formed: only the checksums can tell.
func damage(t *testing.T, archive, dst string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, _ := gzip.NewReader(f)
	tr := tar.NewReader(gz)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Name == "imserver.db" || h.Name == "imserver.pgdump" {
			b[len(b)/2] ^= 0xff
		}
		tw.WriteHeader(h)
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	if err := os.WriteFile(dst, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}
