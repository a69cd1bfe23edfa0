package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Two people in two browsers: a direct conversation, messages both ways,
// unread counts, delivered and read receipts, and a second tab of the same
// person that follows what the first one reads.
func TestDirectConversation(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")

	alice.click("#new-direct")
	alice.pickUser("#direct-search", "bob")
	alice.waitFor("the new conversation", `document.querySelector('#chat-title')?.textContent === 'Bob Baker'`)
	alice.send("hello bob")
	if n := alice.evalInt(`document.querySelectorAll('#messages .msg').length`); n != 1 {
		alice.fail("the optimistic copy was not replaced: %d message elements", n)
	}

	// Bob has no conversation open: an unread count, and the message is
	// only delivered.
	bob.waitUnread("Alice Archer", 1)
	bob.waitFor("the preview", fmt.Sprintf(`%s.querySelector('.conv-preview').textContent === 'hello bob'`, convLink("Alice Archer")))
	alice.waitFor("the delivered receipt", `document.querySelector('#messages .msg-receipt')?.dataset.status === 'delivered'`)

	// A second tab of Bob's shows the same count; reading in the first
	// clears it in both.
	bob2 := bob.sibling("bob-2")
	bob2.do(chromedp.Navigate(srv.URL + "/"))
	bob2.waitOnline()
	bob2.waitUnread("Alice Archer", 1)

	// Open it from the keyboard: focus the entry and press Enter.
	bob.do(chromedp.Focus(chromedp.CSS(`.conv-item[data-kind="direct"]`)))
	bob.pressEnter(false)
	bob.waitMessage("hello bob")
	bob.waitFor("the new-messages marker", `document.querySelector('#unread-marker')?.nextElementSibling?.querySelector('.msg-body')?.textContent === 'hello bob'`)
	bob.waitUnread("Alice Archer", 0)
	bob2.waitUnread("Alice Archer", 0)
	alice.waitReceipt("Read")

	// Enter sends, Shift+Enter breaks the line.
	bob.send("hi alice")
	bob.typeInto("#composer-input", "line one")
	bob.pressEnter(true)
	bob.typeInto("#composer-input", "line two")
	bob.pressEnter(false)
	alice.waitMessage("hi alice")
	alice.waitMessage("line one\nline two")
	bob.waitReceipt("Read")
	bob2.waitFor("the preview of Bob's own message", fmt.Sprintf(`%s.querySelector('.conv-preview').textContent === 'You: line one line two'`, convLink("Alice Archer")))

	// Alice goes back to the list; new messages count up there and in the
	// page title, and opening the conversation clears them.
	alice.eval(`location.hash = '#/'`, nil)
	alice.waitFor("the list view", `!document.querySelector('#chat-title')`)
	bob.send("are you there?")
	bob.send("ping")
	alice.waitUnread("Bob Baker", 2)
	alice.waitFor("the unread count in the title", `document.title.startsWith('(2) ')`)
	alice.openConv("Bob Baker")
	alice.waitUnread("Bob Baker", 0)
	alice.waitFor("the title without count", `!document.title.startsWith('(')`)

	want := []string{"hello bob", "hi alice", "line one\nline two", "are you there?", "ping"}
	for _, p := range []*tab{alice, bob} {
		got := bodies(p.checkOrdered())
		if !slices.Equal(got, want) {
			p.fail("messages = %q, want %q", got, want)
		}
	}
	bob.waitReceipt("Read")

	// Bob clears his history: gone for him, kept for Alice, and what comes
	// next shows up for both.
	bob.click("#details-btn")
	bob.click("#clear-btn")
	bob.click("#confirm-ok")
	bob.waitFor("an empty history", `!document.querySelector('#messages .msg') && !!document.querySelector('#messages .history-start')`)
	bob.click("#details-dialog .close")
	alice.send("after the clear")
	bob.waitMessage("after the clear")
	if got := bodies(bob.checkOrdered()); !slices.Equal(got, []string{"after the clear"}) {
		bob.fail("after clearing: %q", got)
	}
	if got := len(alice.checkOrdered()); got != len(want)+1 {
		alice.fail("alice lost messages when bob cleared: %d", got)
	}

	// The server agrees that Alice has read everything, her own last
	// message included: the page marks what she sees, in a batch.
	conv := alice.evalString(`decodeURIComponent(location.hash.slice(4))`)
	var c apiConv
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c = srv.conversation(t, alice.token(), conv); (c.Unread == 0 && c.ReadSeq == c.MaxSeq) || time.Now().After(deadline) {
			break
		}
	}
	if c.Unread != 0 || c.ReadSeq != c.MaxSeq {
		t.Fatalf("server: alice's entry %+v, want everything read", c)
	}
}

// A group of three: the third member joins after some messages and sees
// only the later ones; receipts count readers; a kicked member sees no more.
func TestGroupWithLateMember(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	carol := newUser(t, srv, "carol", "Carol Chen")

	alice.newGroup("Launch", "bob")
	alice.send("before carol 1")

	bob.openConv("Launch")
	bob.waitMessage("before carol 1")
	bob.send("before carol 2")
	alice.waitMessage("before carol 2")

	// Alice adds Carol from the details dialog.
	alice.click("#details-btn")
	alice.waitFor("the member list", `document.querySelectorAll('#member-list .member').length === 2`)
	alice.pickUser("#add-search", "carol")
	alice.waitFor("carol in the member list", `document.querySelectorAll('#member-list .member').length === 3`)
	alice.click("#details-dialog .close")

	carol.openConv("Launch")
	carol.waitFor("an empty history", `!!document.querySelector('#messages .history-start') && !document.querySelector('#messages .msg')`)
	alice.send("after carol 1")
	carol.waitMessage("after carol 1")
	carol.send("hi all, carol here")
	bob.waitMessage("hi all, carol here")
	alice.waitMessage("hi all, carol here")
	if got := bodies(carol.checkOrdered()); !slices.Equal(got, []string{"after carol 1", "hi all, carol here"}) {
		carol.fail("carol sees %q, want only what came after she joined", got)
	}

	// All three have the group open and focused, so each one's last
	// message is read by both others.
	carol.waitReceipt("Read by 2")
	alice.waitReceipt("Read by 2")

	// Bob also writes to Alice directly: a second conversation in her list,
	// with an unread count, while she stays in the group.
	bob.click("#new-direct")
	bob.pickUser("#direct-search", "alice")
	bob.waitFor("the direct conversation", `document.querySelector('#chat-title')?.textContent === 'Alice Archer'`)
	bob.send("lunch at 12?")
	alice.waitUnread("Bob Baker", 1)
	bob.openConv("Launch")

	// The main screen, for the record (and for a person to look at).
	alice.waitFor("avatars", `document.querySelectorAll('#messages .msg-group.other .avatar').length >= 2`)
	alice.saveScreenshot("main.png")
	alice.darkMode(true)
	alice.saveScreenshot("main-dark.png")
	alice.darkMode(false)

	// Phone width: one pane at a time, with a way back.
	alice.viewport(390, 844, true)
	alice.waitFor("the list hidden", `getComputedStyle(document.querySelector('.sidebar')).display === 'none'`)
	alice.saveScreenshot("phone-conversation.png")
	alice.click("#back-btn")
	alice.waitFor("the list shown", `getComputedStyle(document.querySelector('.sidebar')).display !== 'none' && getComputedStyle(document.querySelector('#chat')).display === 'none'`)
	alice.saveScreenshot("phone-list.png")
	alice.desktop()
	alice.waitFor("the desktop layout", `getComputedStyle(document.querySelector('.sidebar')).display !== 'none' && innerWidth > 1000`)
	alice.openConv("Launch")

	// Alice removes Carol: Carol keeps what she saw and gets nothing new.
	alice.click("#details-btn")
	alice.waitFor("the kick buttons", `document.querySelectorAll('#member-list .kick-btn').length === 2`)
	alice.saveScreenshot("details.png")
	alice.click(`#member-list .member[data-role="member"] .kick-btn[aria-label="Remove Carol Chen"]`)
	alice.click("#confirm-ok")
	alice.waitFor("carol gone from the members", `document.querySelectorAll('#member-list .member').length === 2`)
	alice.click("#details-dialog .close")
	carol.waitFor("the left notice", `!document.querySelector('#left-notice').hidden && document.querySelector('#composer').hidden`)
	alice.send("after the kick")
	bob.waitMessage("after the kick")
	time.Sleep(500 * time.Millisecond)
	if got := bodies(carol.messages()); slices.Contains(got, "after the kick") {
		carol.fail("a kicked member got a message sent after the kick: %q", got)
	}
	carol.waitFor("the old messages kept", `document.querySelectorAll('#messages .msg').length === 2`)

	// Bob leaves; the group stays in his list, marked as left.
	bob.click("#details-btn")
	bob.click("#leave-btn")
	bob.click("#confirm-ok")
	bob.waitFor("the left state", fmt.Sprintf(`%s.classList.contains('left') && !document.querySelector('#left-notice').hidden`, convLink("Launch")))
}

// A reload keeps the session and the history; older messages come page by
// page; far-back unread messages are one jump away.
func TestReloadPagingAndUnreadJump(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	alice.click("#new-direct")
	alice.pickUser("#direct-search", "bob")
	alice.waitFor("the conversation", `document.querySelector('#chat-title')?.textContent === 'Bob Baker'`)
	conv := alice.evalString(`decodeURIComponent(location.hash.slice(4))`)
	aliceToken := alice.token()

	srv.sendAPI(t, aliceToken, conv, "early", 120)
	bob.waitUnread("Alice Archer", 120)

	// Opening puts the first unread at the top: only what is on screen
	// counts as read.
	bob.openConv("Alice Archer")
	bob.waitFor("the marker above the first message", `document.querySelector('#unread-marker')?.nextElementSibling?.querySelector('.msg-body')?.textContent === 'early 1'`)
	bob.waitFor("some but not all read", fmt.Sprintf(`(n => n > 0 && n < 120)(%s)`, bob.unreadExpr("Alice Archer")))
	bob.click("#jump-latest")
	bob.waitUnread("Alice Archer", 0)

	// Reload in the middle of the conversation.
	bob.send("bob before reload")
	alice.waitMessage("bob before reload")
	bob.do(chromedp.Reload())
	bob.waitOnline()
	bob.waitMessage("bob before reload")
	alice.send("alice after reload")
	bob.waitMessage("alice after reload")
	alice.do(chromedp.Reload())
	alice.waitOnline()
	alice.waitMessage("alice after reload")
	alice.waitReceipt("Read")

	// Paging back with before_seq until the start.
	bob.waitFor("only the newest page", `document.querySelectorAll('#messages .msg').length < 100 && !!document.querySelector('#load-older')`)
	bob.waitFor("the start of the conversation after scrolling up", `(m => { m.scrollTop = 0; return !!m.querySelector('.history-start'); })(document.querySelector('#messages'))`)
	msgs := bob.checkOrdered()
	if len(msgs) != 122 || msgs[0].Body != "early 1" || msgs[119].Body != "early 120" {
		bob.fail("after paging back: %d messages, first %+v", len(msgs), msgs[0])
	}

	// Far more unread than a page: the list view first, then a jump.
	bob.eval(`location.hash = '#/'`, nil)
	bob.waitFor("the list view", `!document.querySelector('#chat-title')`)
	srv.sendAPI(t, aliceToken, conv, "late", 400)
	bob.waitUnread("Alice Archer", 400)
	// A fresh page holds none of them (a tab that was open got them all
	// live and shows the marker at once).
	bob.do(chromedp.Reload())
	bob.waitOnline()
	bob.openConv("Alice Archer")
	bob.waitMessage("late 400")
	bob.waitFor("the jump button", `!document.querySelector('#jump-unread').hidden`)
	bob.click("#jump-unread")
	bob.waitFor("the marker above late 1", `document.querySelector('#unread-marker')?.nextElementSibling?.querySelector('.msg-body')?.textContent === 'late 1'`)
	bob.waitFor("the marker on screen", `(r => r.top >= 0 && r.bottom <= innerHeight)(document.querySelector('#unread-marker').getBoundingClientRect())`)
	bob.checkOrdered()
}

// A tab that was offline catches up by seq when it comes back: nothing
// missing, nothing twice; what it tried to send meanwhile goes out once.
func TestOfflineTabCatchesUp(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	alice.click("#new-direct")
	alice.pickUser("#direct-search", "bob")
	alice.waitFor("the conversation", `document.querySelector('#chat-title')?.textContent === 'Bob Baker'`)
	alice.send("before 1")
	bob.openConv("Alice Archer")
	bob.waitMessage("before 1")

	bob.setOffline(true)
	bob.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
	for i := 1; i <= 5; i++ {
		alice.send(fmt.Sprintf("while away %d", i))
	}
	// Bob tries to answer while offline: kept, marked as not sent.
	bob.typeInto("#composer-input", "sent while offline")
	bob.pressEnter(false)
	bob.waitFor("the failed send", `!!document.querySelector('#messages .msg.pending.failed .retry-btn')`)
	bob.saveScreenshot("offline.png")
	cmid := bob.evalString(`document.querySelector('#messages .msg.pending').dataset.cmid`)
	time.Sleep(300 * time.Millisecond)
	if got := bodies(bob.messages()); len(got) != 1 {
		bob.fail("an offline tab got messages: %q", got)
	}

	bob.setOffline(false)
	bob.waitOnline()
	bob.waitMessage("while away 5")
	bob.waitMessage("sent while offline")
	alice.waitMessage("sent while offline")
	want := []string{"before 1", "while away 1", "while away 2", "while away 3", "while away 4", "while away 5", "sent while offline"}
	for _, p := range []*tab{alice, bob} {
		if got := bodies(p.checkOrdered()); !slices.Equal(got, want) {
			p.fail("messages = %q, want %q", got, want)
		}
	}
	if n := bob.evalInt(`document.querySelectorAll('#messages .msg.pending').length`); n != 0 {
		bob.fail("%d messages still pending", n)
	}
	// The retry went out with the client_msg_id of the first attempt.
	if got := bob.evalString(`[...document.querySelectorAll('#messages .msg[data-seq]')].pop().dataset.cmid`); got != cmid {
		bob.fail("stored client_msg_id %q, the failed attempt had %q", got, cmid)
	}
	alice.waitReceipt("Read")

	// Unsent messages survive a reload: only the API is cut, so the page
	// loads again, shows the message as not sent, and sends it with its
	// first client_msg_id once the server is reachable.
	apiOnly := []string{srv.URL + "/api/*", strings.Replace(srv.URL, "http:", "ws:", 1) + "/api/*"}
	bob.setOffline(true, apiOnly...)
	bob.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
	bob.typeInto("#composer-input", "survives a reload")
	bob.pressEnter(false)
	bob.waitFor("the failed send", `!!document.querySelector('#messages .msg.pending.failed')`)
	cmid = bob.evalString(`document.querySelector('#messages .msg.pending').dataset.cmid`)
	bob.do(chromedp.Reload())
	bob.waitFor("the unsent message after the reload", fmt.Sprintf(`document.querySelector('#messages .msg.pending.failed')?.dataset.cmid === %s`, jsString(cmid)))
	bob.setOffline(false)
	bob.waitOnline()
	alice.waitMessage("survives a reload")
	bob.waitFor("the message stored", fmt.Sprintf(`document.querySelector('#messages .msg[data-seq][data-cmid=%s]') && !document.querySelector('#messages .msg.pending')`, jsString(cmid)))
	want = append(want, "survives a reload")
	for _, p := range []*tab{alice, bob} {
		if got := bodies(p.checkOrdered()); !slices.Equal(got, want) {
			p.fail("messages = %q, want %q", got, want)
		}
	}

	// A second time, with the socket cut by the page going offline while a
	// burst arrives in a conversation Bob does not look at.
	bob.eval(`location.hash = '#/'`, nil)
	bob.setOffline(true)
	bob.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
	srv.sendAPI(t, alice.token(), alice.evalString(`decodeURIComponent(location.hash.slice(4))`), "burst", 30)
	bob.setOffline(false)
	bob.waitOnline()
	bob.waitUnread("Alice Archer", 30)
	bob.openConv("Alice Archer")
	bob.waitMessage("burst 30")
	if got := bob.checkOrdered(); len(got) != len(want)+30 {
		bob.fail("after the burst: %d messages, want %d", len(got), len(want)+30)
	}
}

// A storming group shows the banner while storm mode lasts and still
// renders every message.
func TestStormBanner(t *testing.T) {
	srv := startServer(t, "storm: {window: 2s, threshold: 20, lower_mark: 5, flush_interval: 200ms}\n")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	alice.newGroup("Busy", "bob")
	conv := alice.evalString(`decodeURIComponent(location.hash.slice(4))`)
	alice.send("calm before")
	bob.openConv("Busy")
	bob.waitMessage("calm before")

	srv.sendAPI(t, alice.token(), conv, "storm", 80)
	bob.waitFor("the storm banner", `!document.querySelector('#storm-banner').hidden`)
	bob.saveScreenshot("storm.png")
	bob.waitMessage("storm 80")
	if got := bob.checkOrdered(); len(got) != 81 {
		bob.fail("%d messages during the storm, want 81", len(got))
	}
	bob.waitFor("the banner gone after the storm", `document.querySelector('#storm-banner').hidden`)
	alice.waitFor("the banner gone for the sender too", `document.querySelector('#storm-banner').hidden`)
}

// Log out in one tab and the other follows; a token revoked elsewhere sends
// the tab back to the login screen.
func TestLogoutAndRevokedToken(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	alice2 := alice.sibling("alice-2")
	alice2.do(chromedp.Navigate(srv.URL + "/"))
	alice2.waitOnline()

	alice.click("#logout-btn")
	alice.waitFor("the login screen", `!!document.querySelector('#auth-form')`)
	alice2.waitFor("the login screen in the other tab", `!!document.querySelector('#auth-form')`)
	if tok := alice.token(); tok != "" {
		t.Fatalf("token still stored after logout")
	}

	// Wrong password first.
	alice.typeInto("#username", "alice")
	alice.typeInto("#password", "wrong")
	alice.pressEnter(false)
	alice.waitFor("the error", `document.querySelector('#auth-error')?.textContent === 'Wrong username or password.'`)
	alice.eval(`document.querySelector('#username').value = ''; document.querySelector('#password').value = ''`, nil)
	alice.login("alice")

	// The other tab follows the login.
	alice2.waitOnline()

	// The token is revoked behind the tabs' back. Whichever tab notices
	// first (its socket is closed, the reconnect gets 401) ends the
	// session, and the other follows through storage.
	srv.call(t, alice.token(), "POST", "/auth/logout", nil, nil)
	for _, p := range []*tab{alice, alice2} {
		p.waitFor("the login screen after revocation", `!!document.querySelector('#auth-form') && /session has ended|logged out in another tab/.test(document.querySelector('#auth-error').textContent)`)
	}
}

func (b *tab) evalInt(expr string) int {
	b.t.Helper()
	var n int
	b.eval(expr, &n)
	return n
}
