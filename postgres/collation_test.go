package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/imserver/imserver/chat"
	"github.com/jackc/pgx/v5"
)

// TestSearchUsersByteOrder: the user search sorts as the SQLite store does
// (bytes, case folded first) on a database whose collation would sort
// punctuation otherwise (ICU, as many installations default to).
func TestSearchUsersByteOrder(t *testing.T) {
	ctx := context.Background()
	name := fmt.Sprintf("icu%d", os.Getpid())
	admin := func(q string) error {
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, q)
		return err
	}
	if err := admin(`CREATE DATABASE ` + name + ` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`); err != nil {
		t.Fatal(err)
	}
	// Registered first, so run last: after the store below is closed.
	t.Cleanup(func() { _ = admin(`DROP DATABASE ` + name + ` WITH (FORCE)`) })
	db := openTest(t, pg.URL(name), Options{})
	for i, u := range []string{"ann", "Ab", "aa", "a_b", "a.c", "a-d"} {
		if err := db.CreateUser(ctx, chat.User{ID: fmt.Sprint("u", i), Username: u, DisplayName: u}, "h"); err != nil {
			t.Fatal(err)
		}
	}
	us, err := db.SearchUsers(ctx, "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range us {
		got = append(got, u.Username)
	}
	if want := "a-d a.c a_b aa Ab ann"; strings.Join(got, " ") != want {
		t.Errorf("users by prefix a: %q, want %q", strings.Join(got, " "), want)
	}
}
