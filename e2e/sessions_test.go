package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// socketURLs records the address of every WebSocket the tab opens, from
// the browser's own network events (what a proxy would log).
func (b *tab) socketURLs() func() []string {
	b.t.Helper()
	var mu sync.Mutex
	var urls []string
	events := chromedp.Events(b.ctx, network.WebSocketCreated)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			urls = append(urls, ev.URL)
			mu.Unlock()
		}
	}()
	b.do(chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
		return err
	}))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), urls...)
	}
}

// The Settings dialog lists the account's sessions (two browsers here);
// ending the other one logs that browser out. The page opens its sockets
// with one-time tickets, never with its token in the URL.
func TestSessionsAndTickets(t *testing.T) {
	srv := startServer(t, "")
	alice := newPerson(t, srv, "alice")
	urls := alice.socketURLs()
	alice.register("alice", "Alice Archer")
	laptop := newPerson(t, srv, "alice-laptop")
	laptop.do(chromedp.Navigate(srv.URL + "/"))
	laptop.login("alice")

	alice.click("#settings-btn")
	alice.waitFor("two sessions", `document.querySelectorAll('#session-list .session').length === 2`)
	if n := alice.evalInt(`document.querySelectorAll('#session-list .session[data-current="true"]').length`); n != 1 {
		alice.fail("sessions marked current: %d, want 1", n)
	}
	if d := alice.evalString(`document.querySelector('#session-list .session-device').textContent`); !strings.Contains(d, "Chrome") {
		alice.fail("device of a session: %q, want it to name Chrome", d)
	}
	alice.click(`#session-list .session[data-current="false"] button`)
	laptop.waitFor("the login screen in the ended session", `!!document.querySelector('#auth-form') && /session has ended/.test(document.querySelector('#auth-error').textContent)`)
	alice.waitFor("one session left", `document.querySelectorAll('#session-list .session').length === 1`)
	alice.do(chromedp.KeyEvent("\x1b")) // close the dialog
	alice.waitOnline()

	// The laptop logs in again; a password change from alice's browser
	// ends it once more.
	laptop.login("alice")
	alice.click("#settings-btn")
	alice.waitFor("two sessions again", `document.querySelectorAll('#session-list .session').length === 2`)
	alice.typeInto("#old-password", "wrong password")
	alice.typeInto("#new-password", "a new password for alice")
	alice.click("#password-submit")
	alice.waitFor("the wrong-password error", `/current password is wrong/.test(document.querySelector('#password-form .form-error').textContent)`)
	alice.waitOnline() // a wrong old password does not log this browser out
	alice.eval(`document.querySelector('#old-password').value = ''`, nil)
	alice.typeInto("#old-password", "correct horse alice")
	alice.click("#password-submit")
	alice.waitFor("the confirmation", `!document.querySelector('#password-done').hidden`)
	laptop.waitFor("the login screen after the password change", `!!document.querySelector('#auth-form') && /session has ended/.test(document.querySelector('#auth-error').textContent)`)
	alice.waitOnline()

	got := urls()
	if len(got) == 0 {
		t.Fatal("no WebSocket seen")
	}
	for _, u := range got {
		if !strings.Contains(u, "ticket=") || strings.Contains(u, "token=") {
			t.Fatalf("WebSocket URL %q: want a ticket and no token", u)
		}
	}
}
