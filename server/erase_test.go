package server_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// randomWord is a word no file holds by chance.
func randomWord() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

// TestDeleteErases writes a unique word, edits it into another, reacts
// (with an emoji and with a unique :name:, added and taken back: the
// reaction messages name it), deletes the message, stops the server cleanly and then finds neither
// word in any file under the data directory: not in the database, not in
// its WAL, not in the search index. The index keeps terms prefix-compressed,
// so the words' tails are looked for too.
func TestDeleteErases(t *testing.T) {
	if testPG != nil {
		// Documented in docs/scaling.md: PostgreSQL keeps a deleted row's
		// bytes in dead tuples until VACUUM FULL and in WAL segments until
		// they are recycled, which no statement of ours can force.
		t.Skip("the erasure this test checks is SQLite's files; PostgreSQL's limits are documented in docs/scaling.md")
	}
	for _, checkpoint := range []bool{false, true} {
		name := "stopped"
		if checkpoint {
			name = "checkpointed then stopped"
		}
		t.Run(name, func(t *testing.T) {
			ts := newServer(t)
			alice, bob := ts.register(t, "alice"), ts.register(t, "bob")
			g := alice.group(t, "team", bob)
			first, second, third := randomWord(), randomWord(), randomWord()
			for i := range 50 {
				alice.send(t, g.ID, ts.unique("x"), "filler around it "+ts.unique("f")+" "+string(rune('a'+i%26)))
			}
			m := alice.send(t, g.ID, "secret", "the secret is "+first+" ok")
			alice.edit(t, g.ID, m.Seq, "no, it is "+second)
			bob.react(t, g.ID, m.Seq, "🤫", true)
			bob.react(t, g.ID, m.Seq, ":"+third+":", true)
			bob.react(t, g.ID, m.Seq, ":"+third+":", false)
			for range 50 {
				bob.send(t, g.ID, ts.unique("y"), "more filler "+ts.unique("g"))
			}
			alice.remove(t, g.ID, m.Seq)
			if checkpoint {
				db, err := sql.Open("sqlite", "file:"+ts.path)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
					t.Fatal(err)
				}
				db.Close()
			}
			ts.stop()
			dir := filepath.Dir(ts.path)
			files := 0
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				files++
				for _, w := range []string{first, second, third, first[8:], second[8:]} {
					if bytes.Contains(data, []byte(w)) {
						t.Errorf("%s holds %q after the delete", path, w)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files == 0 {
				t.Fatal("no file under the data directory")
			}
		})
	}
}
