package storetest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

// testInvites: a use is taken only while the invite is unexpired with uses
// left, exactly once under races; a taken username gives the use back.
func testInvites(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	now := time.Now().UnixMilli()
	must(t, db.CreateUser(ctx, chat.User{ID: "adm", Username: "adm", DisplayName: "Adm"}, "h"))
	must(t, db.CreateInvite(ctx, chat.Invite{ID: "i1", CreatedBy: "adm", CreatedAt: now, ExpiresAt: now + 60_000, MaxUses: 1}, []byte("c1")))
	must(t, db.CreateInvite(ctx, chat.Invite{ID: "i2", CreatedBy: "adm", CreatedAt: now + 1, ExpiresAt: now - 1, MaxUses: 0}, []byte("c2")))
	wantCode(t, "taken name", db.CreateInvitedUser(ctx, chat.User{ID: "x", Username: "ADM", DisplayName: "X"}, "h", []byte("c1"), now), chat.EConflict)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			errs[i] = db.CreateInvitedUser(ctx, chat.User{ID: "u" + string(rune('0'+i)), Username: "user" + string(rune('0'+i)), DisplayName: "U"}, "h", []byte("c1"), now)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			wantCode(t, "used up", err, chat.EForbidden)
		}
	}
	if ok != 1 {
		t.Errorf("one-use invite used %d times: %v", ok, errs)
	}
	wantCode(t, "expired", db.CreateInvitedUser(ctx, chat.User{ID: "y", Username: "y", DisplayName: "Y"}, "h", []byte("c2"), now), chat.EForbidden)
	wantCode(t, "unknown", db.CreateInvitedUser(ctx, chat.User{ID: "y", Username: "y", DisplayName: "Y"}, "h", []byte("zz"), now), chat.EForbidden)
	list, err := db.Invites(ctx, "adm")
	must(t, err)
	if len(list) != 2 || list[0].ID != "i2" || list[1].ID != "i1" || list[1].Uses != 1 {
		t.Errorf("invites: %+v", list)
	}
	if list, err := db.Invites(ctx, "other"); err != nil || len(list) != 0 {
		t.Errorf("another creator's invites: %+v %v", list, err)
	}
	wantCode(t, "revoke by another", db.DeleteInvite(ctx, "i1", "other"), chat.ENotFound)
	must(t, db.DeleteInvite(ctx, "i1", ""))
	wantCode(t, "revoked twice", db.DeleteInvite(ctx, "i1", ""), chat.ENotFound)
}

// testAdminAndNotify: disabling deletes the tokens; mutes show in the
// entry and move its version; push subscriptions and settings.
func testAdminAndNotify(t *testing.T, o Opener) {
	ctx := context.Background()
	db := open(t, o, Options{})
	must(t, db.CreateUser(ctx, chat.User{ID: "a", Username: "ann", DisplayName: "Ann"}, "h"))
	must(t, db.CreateUser(ctx, chat.User{ID: "b", Username: "ben", DisplayName: "Ben"}, "h"))
	must(t, db.CreateToken(ctx, "b", []byte{7}, chat.Session{ID: "s", CreatedAt: 1, LastUsedAt: 1}))
	hashes, err := db.SetDisabled(ctx, "b", 5)
	if err != nil || len(hashes) != 1 || !bytes.Equal(hashes[0], []byte{7}) {
		t.Errorf("disable: %v %v", hashes, err)
	}
	if d, err := db.UserDisabled(ctx, "b"); err != nil || !d {
		t.Errorf("disabled: %v %v", d, err)
	}
	_, err = db.UserByToken(ctx, []byte{7})
	wantCode(t, "token of a disabled user", err, chat.ENotFound)
	_, err = db.SetDisabled(ctx, "zz", 5)
	wantCode(t, "disable unknown", err, chat.ENotFound)
	users, err := db.Users(ctx)
	if err != nil || len(users) != 2 || users[1].ID != "b" || users[1].DisabledAt != 5 {
		t.Errorf("users: %+v %v", users, err)
	}
	_, err = db.SetDisabled(ctx, "b", 0)
	must(t, err)
	if d, _ := db.UserDisabled(ctx, "b"); d {
		t.Error("enabled user still disabled")
	}

	must(t, db.CreateGroup(ctx, "g", "G", "a", []string{"b"}))
	v0, err := db.MaxVersion(ctx, "b")
	must(t, err)
	until := time.Now().Add(time.Hour).UnixMilli()
	must(t, db.SetMute(ctx, "g", "b", until))
	c, err := db.Conversation(ctx, "g", "b")
	if err != nil || c.MutedUntil != until || c.Version <= v0 {
		t.Errorf("muted entry: %+v %v (version before %d)", c, err, v0)
	}
	must(t, db.SetMute(ctx, "g", "b", time.Now().Add(-time.Hour).UnixMilli()))
	if c, _ := db.Conversation(ctx, "g", "b"); c.MutedUntil != 0 {
		t.Errorf("an ended mute shows: %d", c.MutedUntil)
	}
	wantCode(t, "mute as stranger", db.SetMute(ctx, "g", "z", until), chat.ENotMember)
	wantCode(t, "mute unknown", db.SetMute(ctx, "zz", "a", until), chat.ENotFound)

	must(t, db.AddPushSubscription(ctx, chat.PushSubscription{UserID: "a", Endpoint: "https://e/1", P256dh: "p", Auth: "x", CreatedAt: 1}))
	must(t, db.AddPushSubscription(ctx, chat.PushSubscription{UserID: "a", Endpoint: "https://e/1", P256dh: "p2", Auth: "x", CreatedAt: 2}))
	for i := range 25 {
		must(t, db.AddPushSubscription(ctx, chat.PushSubscription{UserID: "b", Endpoint: "https://f/" + string(rune('a'+i)), P256dh: "p", Auth: "x", CreatedAt: int64(10 + i)}))
	}
	subs, err := db.PushSubscriptions(ctx, "a")
	if err != nil || len(subs) != 1 || subs[0].P256dh != "p2" {
		t.Errorf("subscriptions: %+v %v", subs, err)
	}
	if subs, _ := db.PushSubscriptions(ctx, "b"); len(subs) != 20 || subs[0].CreatedAt != 15 {
		t.Errorf("a user keeps the newest 20 subscriptions: %d", len(subs))
	}
	must(t, db.DeletePushSubscription(ctx, "b", "https://e/1"))
	if subs, _ := db.PushSubscriptions(ctx, "a"); len(subs) != 1 {
		t.Error("another user deleted a subscription")
	}
	must(t, db.DeletePushSubscription(ctx, "", "https://e/1"))
	if subs, _ := db.PushSubscriptions(ctx, "a"); len(subs) != 0 {
		t.Errorf("dropped subscription stays: %+v", subs)
	}

	v, err := db.InitSetting(ctx, "k", []byte("first"))
	if err != nil || string(v) != "first" {
		t.Errorf("setting: %q %v", v, err)
	}
	if v, err := db.InitSetting(ctx, "k", []byte("second")); err != nil || string(v) != "first" {
		t.Errorf("setting kept: %q %v", v, err)
	}
}
