package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/internal/pgtest"
	"github.com/imserver/imserver/postgres"
	"github.com/imserver/imserver/storage"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	testPGOnce sync.Once
	testPG     *pgtest.Server
	testPGErr  error
)

// testPostgres is the PostgreSQL of this test binary, started on first use
// and stopped by TestMain.
func testPostgres(t *testing.T) *pgtest.Server {
	t.Helper()
	testPGOnce.Do(func() { testPG, testPGErr = pgtest.Start("") })
	if testPGErr != nil {
		t.Fatalf("starting PostgreSQL: %v", testPGErr)
	}
	return testPG
}

func stopTestPostgres() {
	if testPG != nil {
		testPG.Stop()
	}
}

// migrate runs `imserver migrate-to-postgres --from from --to to` and
// returns what it printed.
func migrate(from, to string) (string, error) {
	var out bytes.Buffer
	cmd := rootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"migrate-to-postgres", "--from", from, "--to", to})
	err := cmd.Execute()
	return out.String(), err
}

// TestMigrateToPostgres fills a SQLite database through its store, copies
// it with `imserver migrate-to-postgres`, and checks through the
// PostgreSQL store that everything is there and that work goes on from
// where it was: seqs, versions, markers, tokens.
func TestMigrateToPostgres(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "src.db")
	src, err := storage.Open(ctx, path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"ann", "ben", "cat"} {
		if err := src.CreateUser(ctx, chat.User{ID: u, Username: strings.ToUpper(u[:1]) + u[1:], DisplayName: u}, "hash-"+u); err != nil {
			t.Fatal(err)
		}
		if err := src.CreateToken(ctx, u, []byte("tok-"+u), chat.Session{ID: "s-" + u, CreatedAt: 1, LastUsedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.CreateGroup(ctx, "g", "Group", "ann", []string{"ben", "cat"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.CreateDirect(ctx, "d", "ann", "ben"); err != nil {
		t.Fatal(err)
	}
	for i := range 250 {
		conv := []string{"g", "d"}[i%2]
		if _, _, err := src.Append(ctx, chat.Message{Conv: conv, From: "ann", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: fmt.Sprint("m", i)})(); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			if err := src.RemoveMember(ctx, "g", "cat"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := src.SetRead(ctx, "g", "ben", 40); err != nil {
		t.Fatal(err)
	}
	srcVersion, _ := src.MaxVersion(ctx, "ben")
	srcChanges, _ := src.ConversationsSince(ctx, "cat", 0, 10)
	src.Close()

	url := testPostgres(t).NewDB(t)
	out, err := migrate(path, url)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "messages") || strings.Contains(out, pgtest.Password) {
		t.Errorf("output (it must name the tables and not show the password):\n%s", out)
	}

	dst, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if u, err := dst.UserByToken(ctx, []byte("tok-ben")); err != nil || u.ID != "ben" {
		t.Errorf("token: %+v %v", u, err)
	}
	if _, hash, err := dst.UserByName(ctx, "ANN"); err != nil || hash != "hash-ann" {
		t.Errorf("user: %q %v", hash, err)
	}
	p, err := dst.Messages(ctx, "g", "ann", chat.PageQuery{Limit: 1000})
	if err != nil || len(p.Messages) != 125 || p.Messages[124].Seq != 125 || p.Messages[0].Body != "m0" {
		t.Fatalf("group messages: %d, %v", len(p.Messages), err)
	}
	if p, err := dst.Messages(ctx, "g", "cat", chat.PageQuery{Limit: 1000}); err != nil || p.MaxSeq != 51 || len(p.Messages) != 51 {
		t.Errorf("the kicked member's range: max %d, %d messages, %v", p.MaxSeq, len(p.Messages), err)
	}
	c, err := dst.Conversation(ctx, "g", "ben")
	if err != nil || c.ReadSeq != 40 || c.Unread != 85 {
		t.Errorf("ben's entry: %+v %v", c, err)
	}
	if v, _ := dst.MaxVersion(ctx, "ben"); v != srcVersion {
		t.Errorf("max version %d, was %d", v, srcVersion)
	}
	ch, _ := dst.ConversationsSince(ctx, "cat", 0, 10)
	got, _ := json.Marshal(ch)
	want, _ := json.Marshal(srcChanges)
	if string(got) != string(want) {
		t.Errorf("cat's sync differs:\n%s\n%s", got, want)
	}
	// Work goes on: the next seq, a retry of an old send, a new version.
	m, dup, err := dst.Append(ctx, chat.Message{Conv: "g", From: "ann", ClientMsgID: "next", Kind: "text", Body: "x"})()
	if err != nil || dup || m.Seq != 126 {
		t.Errorf("next send: seq %d dup %v %v", m.Seq, dup, err)
	}
	if m, dup, err := dst.Append(ctx, chat.Message{Conv: "d", From: "ann", ClientMsgID: "1", Kind: "text", Body: "x"})(); err != nil || !dup || m.Seq != 1 {
		t.Errorf("retry of an old send: seq %d dup %v %v", m.Seq, dup, err)
	}
	if v, _ := dst.MaxVersion(ctx, "ben"); v <= srcVersion {
		t.Errorf("version did not move past the copied ones: %d <= %d", v, srcVersion)
	}

	// A second run refuses: the target is no longer empty.
	if _, err := migrate(path, url); err == nil || !strings.Contains(err.Error(), "empty database") {
		t.Errorf("second run: got %v, want a refusal", err)
	}
}

// TestMigrateToPostgresV11: a SQLite database holding v1.1 data (an edit,
// a reaction, a reply with a mention, a delete, an attachment) is copied
// whole: pulls return the same folded messages, the entry counts the same
// unread mentions, search finds the same messages (the vectors are written
// by the migration), and the file's row and link come along.
func TestMigrateToPostgresV11(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v11.db")
	src, err := storage.Open(ctx, path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CreateGroup(ctx, "g", "g", "u", []string{"v"}); err != nil {
		t.Fatal(err)
	}
	if err := src.CreateFile(ctx, chat.FileRecord{File: chat.File{ID: "f", Name: "a.txt", Size: 1, Mime: "text/plain"}, Uploader: "u", SHA256: "abc", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	on := true
	for i, m := range []chat.Message{
		{Kind: chat.KindText, Body: "first café"},
		{Kind: chat.KindEdit, Target: 1, Body: "first crème"},
		{Kind: chat.KindReaction, Target: 1, Emoji: "+1", On: &on, From: "v"},
		{Kind: chat.KindText, Body: "a reply to @v", ReplyTo: 1, Mentions: []string{"v"}},
		{Kind: chat.KindText, Body: "gone soon"},
		{Kind: chat.KindDelete, Target: 5},
		{Kind: chat.KindText, Body: "with a file", Attachments: []chat.File{{ID: "f"}}},
		// An ASCII edit leaves the words it took out in SQLite's index
		// (messages.stale): derived data PostgreSQL has no place for.
		{Kind: chat.KindText, Body: "plain old words"},
		{Kind: chat.KindEdit, Target: 8, Body: "plain new words"},
	} {
		m.Conv, m.ClientMsgID = "g", fmt.Sprint(i)
		if m.From == "" {
			m.From = "u"
		}
		if _, _, err := src.Append(ctx, m)(); err != nil {
			t.Fatal(err)
		}
	}
	srcPage, err := src.Messages(ctx, "g", "v", chat.PageQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	srcEntry, err := src.Conversation(ctx, "g", "v")
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	url := testPostgres(t).NewDB(t)
	if err := migrateToPostgres(ctx, path, url, io.Discard); err != nil {
		t.Fatal(err)
	}
	dst, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	p, err := dst.Messages(ctx, "g", "v", chat.PageQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(p)
	want, _ := json.Marshal(srcPage)
	if string(got) != string(want) {
		t.Errorf("folded page differs:\n%s\n%s", got, want)
	}
	c, err := dst.Conversation(ctx, "g", "v")
	if err != nil || c.Mentions != srcEntry.Mentions || c.Unread != srcEntry.Unread || c.Mentions != 1 {
		t.Errorf("v's entry: %+v, %v; was %+v", c, err, srcEntry)
	}
	for q, want := range map[string][]int64{"creme": {1}, "cafe": nil, "reply": {4}, "gone": nil, "file": {7}, "old": nil, "new": {8}} {
		sq, _ := chat.ParseSearch(q)
		sq.Limit = 10
		res, err := dst.Search(ctx, "v", sq)
		var seqs []int64
		for _, h := range res.Results {
			seqs = append(seqs, h.Message.Seq)
		}
		if err != nil || !slices.Equal(seqs, want) {
			t.Errorf("search %q: %v, %v; want %v", q, seqs, err, want)
		}
	}
	if f, err := dst.FileFor(ctx, "f", "v"); err != nil || f.SHA256 != "abc" || f.AttachedAt == 0 {
		t.Errorf("file: %+v, %v", f, err)
	}
}

// TestBackupPostgresBadURL: backup and restore on an unreachable
// PostgreSQL say so and never print the password (libpq gets it through
// the environment, never on a command line).
func TestBackupPostgresBadURL(t *testing.T) {
	for _, c := range []string{"backup", "restore"} {
		var out bytes.Buffer
		cmd := rootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		archive := filepath.Join(t.TempDir(), "x.tar")
		if c == "restore" {
			if err := os.WriteFile(archive, []byte("not an archive"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd.SetArgs([]string{c, archive, "--db", "postgres://u:secretpw@127.0.0.1:1/db"})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "connect") || strings.Contains(err.Error()+out.String(), "secretpw") {
			t.Errorf("%s on an unreachable PostgreSQL: %v\n%s", c, err, out.String())
		}
	}
}

// TestMigrateCheckFindsMismatch: the check that ends a copy refuses a
// target that differs from the source in a table's row count or in a
// conversation's messages or max_seq (here the copy is made, then the
// target changed inside the check's transaction).
func TestMigrateCheckFindsMismatch(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "src.db")
	src, err := storage.Open(ctx, path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"ann", "ben"} {
		if err := src.CreateUser(ctx, chat.User{ID: u, Username: u, DisplayName: u}, "hash-"+u); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := src.CreateDirect(ctx, "d", "ann", "ben"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, _, err := src.Append(ctx, chat.Message{Conv: "d", From: "ann", ClientMsgID: fmt.Sprint(i), Kind: "text", Body: fmt.Sprint("m", i)})(); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	url := testPostgres(t).NewDB(t)
	if err := migrateToPostgres(ctx, path, url, io.Discard); err != nil {
		t.Fatal(err)
	}
	sdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tc := range []struct{ name, tamper, want string }{
		{"a row missing", `DELETE FROM messages WHERE seq = 5`, "check: messages has 5 rows in SQLite but 4 in PostgreSQL"},
		{"max_seq", `UPDATE conversations SET max_seq = 4 WHERE id = 'd'`, "check: conversation d: SQLite has 5 messages up to seq 5 (max_seq 5), PostgreSQL 5 up to 5 (max_seq 4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stx, err := sdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer stx.Rollback()
			ptx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer ptx.Rollback(ctx)
			if err := checkCopy(ctx, stx, ptx, []tableCopy{{name: "users"}, {name: "messages"}}); err != nil {
				t.Fatalf("the check refuses the copy as made: %v", err)
			}
			if _, err := ptx.Exec(ctx, tc.tamper); err != nil {
				t.Fatal(err)
			}
			if err := checkCopy(ctx, stx, ptx, []tableCopy{{name: "users"}, {name: "messages"}}); err == nil || err.Error() != tc.want {
				t.Fatalf("check after %s: got %v, want %q", tc.tamper, err, tc.want)
			}
		})
	}
}

// TestMigrateToPostgresNUL: text with NUL characters, which older
// versions let into SQLite and PostgreSQL cannot hold, does not stop the
// copy: each becomes U+FFFD, and the output counts them.
func TestMigrateToPostgresNUL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "src.db")
	src, err := storage.Open(ctx, path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CreateUser(ctx, chat.User{ID: "ann", Username: "ann", DisplayName: "ann"}, "hash"); err != nil {
		t.Fatal(err)
	}
	if err := src.CreateGroup(ctx, "g", "n\x00g", "ann", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Append(ctx, chat.Message{Conv: "g", From: "ann", ClientMsgID: "1", Kind: "text", Body: "a\x00b\x00c"})(); err != nil {
		t.Fatal(err)
	}
	src.Close()

	url := testPostgres(t).NewDB(t)
	out, err := migrate(path, url)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "3 NUL characters") {
		t.Errorf("output does not count the 3 NUL characters:\n%s", out)
	}
	dst, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	p, err := dst.Messages(ctx, "g", "ann", chat.PageQuery{Limit: 10})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Body != "a\uFFFDb\uFFFDc" {
		t.Fatalf("messages: %+v %v", p.Messages, err)
	}
	if c, err := dst.Conversation(ctx, "g", "ann"); err != nil || c.Name != "n\uFFFDg" {
		t.Errorf("group name: %q %v", c.Name, err)
	}
}

// TestMigrateToPostgresMissingSource: a --from that does not exist is
// refused; it used to be made into an empty database and "copied".
func TestMigrateToPostgresMissingSource(t *testing.T) {
	from := filepath.Join(t.TempDir(), "typo.db")
	if out, err := migrate(from, testPostgres(t).NewDB(t)); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing source: %v\n%s", err, out)
	}
	if _, err := os.Stat(from); !os.IsNotExist(err) {
		t.Errorf("the missing source was created (%v)", err)
	}
}

// TestMigrateToPostgresBesideServer: a source a server has open is
// refused (what the server stores after the copy would be missing from
// PostgreSQL), and the server goes on serving.
func TestMigrateToPostgresBesideServer(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "live.db")
	srv := startLogged(t, "live", from, writeConfig(t, dir, ""))
	if out, err := migrate(from, testPostgres(t).NewDB(t)); err == nil || !strings.Contains(err.Error(), "open in another process") {
		t.Fatalf("a source a server has open: %v\n%s", err, out)
	}
	registerUser(t, srv, "alice")
}
