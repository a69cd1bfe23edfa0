package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// grantNotifications lets the tab's browser context show notifications
// for the server's origin, as clicking "Allow" in the browser's prompt
// does (headless Chromium has no prompt to click).
func (b *tab) grantNotifications() {
	b.t.Helper()
	c := chromedp.FromContext(b.ctx)
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	params := map[string]any{"permissions": []string{"notifications"}, "origin": b.srv.URL}
	if c.BrowserContextID != "" {
		params["browserContextId"] = c.BrowserContextID
	}
	if err := c.Browser.Call(ctx, "Browser.grantPermissions", params, nil); err != nil {
		b.fail("Browser.grantPermissions: %v", err)
	}
}

// hideAndSpy makes the page believe it is in a background tab and records
// the desktop notifications it shows in window.__shown.
func (b *tab) hideAndSpy() {
	b.t.Helper()
	b.eval(`(() => {
		Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
		Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
		window.__shown = [];
		const N = window.Notification;
		window.Notification = class extends N {
			constructor(title, opts) {
				window.__shown.push({ title, body: opts?.body ?? '', tag: opts?.tag ?? '' });
				super(title, opts);
			}
		};
		return true;
	})()`, nil)
}

type meJSON struct {
	User struct {
		ID string `json:"id"`
	} `json:"user"`
}

// directWith makes a direct conversation between the tokens' users.
func (s *server) directWith(t *testing.T, token, peerToken string) string {
	t.Helper()
	var peer meJSON
	s.call(t, peerToken, "GET", "/me", nil, &peer)
	var r struct {
		Conversation apiConv `json:"conversation"`
	}
	s.call(t, token, "POST", "/conversations/direct", map[string]string{"user_id": peer.User.ID}, &r)
	return r.Conversation.ID
}

func TestNotificationsPromptAndHiddenTab(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newPerson(t, srv, "bob")
	bob.grantNotifications()
	bob.register("bob", "Bob Baker")
	conv := srv.directWith(t, alice.token(), bob.token())
	bob.waitConv("Alice Archer")

	// The browser is never asked by itself: the page offers a button.
	bob.waitFor("the enable button", `document.querySelector('#notify-enable')?.hidden === false`)
	bob.hideAndSpy()
	srv.sendAPI(t, alice.token(), conv, "before enabling", 1)
	bob.waitUnread("Alice Archer", 1)
	if n := bob.evalInt(`window.__shown.length`); n != 0 {
		t.Fatalf("%d notifications before they were enabled", n)
	}
	// The unread count is in the title and on the favicon.
	bob.waitFor("the unread title", `document.title.startsWith('(1) ')`)
	bob.waitFor("the favicon badge", `document.querySelector('link[rel=icon]').getAttribute('href') === '/favicon-unread.svg'`)

	bob.click("#notify-enable")
	bob.waitFor("the button to go", `document.querySelector('#notify-enable').hidden`)
	srv.sendAPI(t, alice.token(), conv, "lunch at noon?", 1)
	bob.waitFor("a desktop notification", `window.__shown.length === 1`)
	var shown []struct{ Title, Body, Tag string }
	bob.eval(`window.__shown`, &shown)
	if shown[0].Title != "Alice Archer" || shown[0].Body != "lunch at noon? 1" || shown[0].Tag != "conv:"+conv {
		t.Errorf("notification: %+v", shown[0])
	}
	// Bob's own messages from another device are not notified, nor
	// counted; that device reading what it shows clears the count here.
	srv.sendAPI(t, bob.token(), conv, "mine", 1)
	bob.eval(`new Promise(r => setTimeout(r, 300))`, nil)
	if n := bob.evalInt(`window.__shown.length`); n != 1 {
		t.Errorf("%d notifications after bob's own message, want 1", n)
	}
	bob.waitUnread("Alice Archer", 2)
	srv.call(t, bob.token(), "POST", "/conversations/"+conv+"/read", map[string]int64{"seq": 3}, nil)
	bob.waitUnread("Alice Archer", 0)
	// The service worker is served for the whole site.
	bob.waitFor("the service worker script", `fetch('/sw.js').then(r => r.ok && r.headers.get('Service-Worker-Allowed') === '/')`)
}

func TestMuteConversation(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newPerson(t, srv, "bob")
	bob.grantNotifications()
	bob.register("bob", "Bob Baker")
	conv := srv.directWith(t, alice.token(), bob.token())
	bob.click("#notify-enable")
	bob.openConv("Alice Archer")

	bob.click("#mute-btn")
	bob.click("#mute-1h")
	bob.waitFor("the muted bell", `document.querySelector('#mute-btn').dataset.muted === 'true'`)
	bob.waitFor("the muted mark in the list", `!!(`+convLink("Alice Archer")+`)?.querySelector('.conv-muted')`)
	var r struct {
		Conversation struct {
			MutedUntil int64 `json:"muted_until"`
		} `json:"conversation"`
	}
	srv.call(t, bob.token(), "GET", "/conversations/"+conv, nil, &r)
	if hour := time.Now().Add(time.Hour).UnixMilli(); r.Conversation.MutedUntil < hour-60_000 || r.Conversation.MutedUntil > hour+60_000 {
		t.Errorf("muted_until %d, want about an hour from now", r.Conversation.MutedUntil)
	}

	// Muted: no desktop notification while hidden.
	bob.eval(`location.hash = "#/"`, nil)
	bob.hideAndSpy()
	srv.sendAPI(t, alice.token(), conv, "muted message", 1)
	bob.waitUnread("Alice Archer", 1)
	bob.eval(`new Promise(r => setTimeout(r, 300))`, nil)
	if n := bob.evalInt(`window.__shown.length`); n != 0 {
		t.Errorf("%d notifications while muted", n)
	}

	bob.openConv("Alice Archer")
	bob.click("#mute-btn")
	bob.click("#unmute")
	bob.waitFor("the bell back", `document.querySelector('#mute-btn').dataset.muted === 'false'`)
	srv.call(t, bob.token(), "GET", "/conversations/"+conv, nil, &r)
	if r.Conversation.MutedUntil != 0 {
		t.Errorf("after unmute: muted_until %d", r.Conversation.MutedUntil)
	}
	bob.click("#mute-btn")
	bob.click("#mute-forever")
	bob.waitFor("muted until unmuted", `document.querySelector('#mute-btn').title === 'Muted until you unmute'`)
}

// cliInvite makes an invite with `imserver invite create` on the running
// server's database, as the first admin does.
func (s *server) cliInvite(t *testing.T, args ...string) string {
	t.Helper()
	db := filepath.Join(filepath.Dir(s.log), "im.db")
	out, err := exec.Command(serverBin, append([]string{"invite", "create", "--db", db, "--url", s.URL}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("invite create: %v\n%s", err, out)
	}
	link := strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	if !strings.HasPrefix(link, s.URL+"/join/") {
		t.Fatalf("invite create printed %q", out)
	}
	return link
}

// join creates an account on the join page at link.
func (b *tab) join(link, username string) {
	b.t.Helper()
	b.do(chromedp.Navigate(link))
	b.waitFor("the join page", `!!document.querySelector('#join-form')`)
	b.typeInto("#username", username)
	b.typeInto("#password", "correct horse "+username)
	b.click("#join-submit")
}

func TestInviteJoinPage(t *testing.T) {
	srv := startServer(t, "auth:\n  registration: invite\n  admins: [root]\n")
	link := srv.cliInvite(t)

	root := newPerson(t, srv, "root")
	// Without an invite the login page refuses new accounts.
	root.do(chromedp.Navigate(srv.URL + "/"))
	root.waitFor("the login form", `!!document.querySelector('#auth-form')`)
	root.join(link, "root")
	root.waitOnline()
	root.waitFor("the address back at /", `location.pathname === '/'`)

	// A user makes a link in the invites dialog.
	root.click("#invite-btn")
	root.click("#invite-create")
	root.waitFor("the new link", `document.querySelector('#invite-link').value.includes('/join/')`)
	link2 := root.evalString(`document.querySelector('#invite-link').value`)
	root.waitFor("the invite listed", `document.querySelectorAll('#invite-list .invite-row').length === 1`)

	ben := newPerson(t, srv, "ben")
	ben.join(link2, "ben")
	ben.waitOnline()

	// Used up (one use by default): the next person is told so.
	carol := newPerson(t, srv, "carol")
	carol.join(link2, "carol")
	carol.waitFor("the used-up message", `/invalid, expired or used up/.test(document.querySelector('#join-error').textContent)`)
	// So is the first link, also one use.
	carol.do(chromedp.Navigate(srv.URL + "/"))
	carol.join(link, "carol")
	carol.waitFor("the used-up message", `/invalid, expired or used up/.test(document.querySelector('#join-error').textContent)`)

	// Revoking from the dialog.
	root.click("#invite-create")
	root.waitFor("two invites", `document.querySelectorAll('#invite-list .invite-row').length === 2`)
	root.eval(`document.querySelector('#invite-list .invite-revoke').click()`, nil)
	root.waitFor("one invite", `document.querySelectorAll('#invite-list .invite-row').length === 1`)
}

func TestAdminDisablesUser(t *testing.T) {
	srv := startServer(t, "auth:\n  admins: [root]\n")
	root := newUser(t, srv, "root", "Root Admin")
	bob := newUser(t, srv, "bob", "Bob Baker")
	bob.waitOnline()

	root.waitFor("the admin button", `document.querySelector('#admin-btn')?.hidden === false`)
	bob.waitFor("no admin button for others", `document.querySelector('#admin-btn')?.hidden === true`)
	root.click("#admin-btn")
	root.waitFor("the users", `document.querySelectorAll('#admin-users .admin-user').length === 2`)
	root.waitFor("the status", `/Version/.test(document.querySelector('#admin-status').textContent) && /ok/.test(document.querySelector('#admin-status').textContent)`)
	root.eval(`document.querySelector('#admin-users .admin-user[data-username="bob"] .user-toggle').click()`, nil)
	root.waitFor("bob disabled", `document.querySelector('#admin-users .admin-user[data-username="bob"]')?.dataset.disabled === 'true'`)

	// Bob's tab is logged out at once and cannot log in again.
	bob.waitFor("bob's login screen", `!!document.querySelector('#auth-form')`)
	bob.typeInto("#username", "bob")
	bob.typeInto("#password", "correct horse bob")
	bob.pressEnter(false)
	bob.waitFor("the disabled message", `document.querySelector('#auth-error')?.textContent === 'This account is disabled.'`)

	root.eval(`document.querySelector('#admin-users .admin-user[data-username="bob"] .user-toggle').click()`, nil)
	root.waitFor("bob enabled", `document.querySelector('#admin-users .admin-user[data-username="bob"]')?.dataset.disabled === 'false'`)
	bob.eval(`document.querySelector('#username').value = ''; document.querySelector('#password').value = ''`, nil)
	bob.login("bob")
}
