package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// What a team works with (PROTOCOL.md v1.1) in the browser: edits, deletes,
// reactions, replies, mentions, search, typing and presence. Alice and Bob
// each have a browser of their own; the subtests share one server, one
// group and one direct conversation, and each leaves both people on the
// group with nothing pending.
func TestTeamwork(t *testing.T) {
	// Storm mode (batched delivery) is tested elsewhere; seeding a few
	// hundred messages here should not start it (0 turns it off). A short
	// presence grace keeps the offline wait short.
	srv := startServer(t, "storm: {threshold: 0}\nwebsocket: {presence_grace: 1s}\n")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")

	// A direct conversation (for presence) and a group (for the rest).
	bob.click("#new-direct")
	bob.pickUser("#direct-search", "alice")
	bob.waitFor("the direct conversation", `document.querySelector('#chat-title')?.textContent === 'Alice Archer'`)
	alice.newGroup("Team", "bob")
	team := alice.evalString(`decodeURIComponent(location.hash.slice(4))`)
	alice.send("welcome to the team")
	bob.openConv("Team")
	bob.waitMessage("welcome to the team")
	ppl := []*tab{alice, bob}
	// begin points the tabs at a subtest and puts both on the group, so
	// one failing subtest does not fail the next ones.
	begin := func(t *testing.T) {
		use(t, ppl...)
		for _, p := range ppl {
			if p.evalString(`document.querySelector('#chat-title')?.textContent ?? ''`) != "Team" || p.evalInt(`document.querySelectorAll('dialog').length`) > 0 {
				p.eval(`document.querySelectorAll('dialog').forEach(d => d.close())`, nil)
				p.openConv("Team")
			}
			// Nothing left in the composer by a subtest that failed.
			p.eval(`document.querySelector('#context-cancel')?.click(); document.querySelector('#composer-input').value = ''; document.querySelector('#search-close')?.click()`, nil)
		}
	}

	t.Run("Edit", func(t *testing.T) {
		begin(t)
		alice.send("helo team")
		bob.waitMessage("helo team")

		// From the message's menu.
		alice.messageAction("helo team", "act-edit")
		alice.waitFor("the edit mode", `document.querySelector('#composer-context')?.dataset.mode === 'edit' && document.querySelector('#composer-input').value === 'helo team'`)
		alice.eval(`document.querySelector('#composer-input').select()`, nil)
		alice.typeInto("#composer-input", "hello team")
		alice.pressEnter(false)
		for _, p := range ppl {
			p.waitFor("the edit", fmt.Sprintf(`(e => e && e.querySelector('.msg-edited')?.textContent === '(edited)')(%s)`, msgExpr("hello team")))
		}
		if n := bob.evalInt(fmt.Sprintf(`[...document.querySelectorAll('#messages .msg-body')].filter(e => e.textContent === %s).length`, jsString("helo team"))); n != 0 {
			bob.fail("the old body is still shown")
		}

		// Up on the empty composer edits the last own message; Escape
		// leaves it as it was.
		alice.focus("#composer-input")
		alice.pressKey("ArrowUp")
		alice.waitFor("the edit mode from Up", `document.querySelector('#composer-context')?.dataset.mode === 'edit' && document.querySelector('#composer-input').value === 'hello team'`)
		alice.pressKey("Escape")
		alice.waitFor("the edit cancelled", `document.querySelector('#composer-context').hidden && document.querySelector('#composer-input').value === ''`)
		alice.pressKey("ArrowUp")
		alice.waitFor("the edit mode again", `document.querySelector('#composer-input').value === 'hello team'`)
		alice.typeInto("#composer-input", "!")
		alice.pressEnter(false)
		bob.waitMessage("hello team!")
		alice.waitMessage("hello team!")
		alice.waitFor("the composer back to normal", `document.querySelector('#composer-context').hidden && document.querySelector('#send-btn').textContent === 'Send'`)

		// The folded state after a reload: the pull brings the message
		// edited, and the edits themselves are not shown as messages.
		bob.reload()
		bob.waitFor("the edited message after a reload", fmt.Sprintf(`(e => e && !!e.querySelector('.msg-edited'))(%s)`, msgExpr("hello team!")))
		if got := bodies(bob.checkOrdered()); !equal(got, []string{"welcome to the team", "hello team!"}) {
			bob.fail("after the reload: %q", got)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		begin(t)
		alice.send("oops, wrong group")
		bob.waitMessage("oops, wrong group")
		n := len(bob.messages())

		// Cancel first: nothing happens.
		alice.messageAction("oops, wrong group", "act-delete")
		alice.waitFor("the confirmation", `!!document.querySelector('#confirm-dialog[open]')`)
		alice.click("#confirm-cancel")
		alice.waitFor("the dialog gone", `!document.querySelector('#confirm-dialog')`)
		alice.waitMessage("oops, wrong group")

		alice.messageAction("oops, wrong group", "act-delete")
		alice.click("#confirm-ok")
		for _, p := range ppl {
			p.waitFor("the deleted placeholder", `[...document.querySelectorAll('#messages .msg.deleted .msg-body')].some(e => e.textContent === 'This message was deleted')`)
			if strings.Contains(p.evalString(`document.querySelector('#messages').textContent`), "oops, wrong group") {
				p.fail("the deleted body is still on the page")
			}
		}
		if got := len(bob.messages()); got != n {
			bob.fail("%d messages after the delete, want %d (a delete is not a message of its own)", got, n)
		}
		bob.reload()
		bob.waitFor("the deleted message after a reload", `!!document.querySelector('#messages .msg.deleted')`)
		if strings.Contains(bob.evalString(`document.querySelector('#messages').textContent`), "oops, wrong group") {
			bob.fail("the deleted body came back with the reload")
		}
		// Bob cannot delete Alice's message: he has no menu entry for it.
		if bob.evalInt(fmt.Sprintf(`%s.querySelectorAll('.act-delete').length`, msgExpr("hello team!"))) != 0 {
			bob.fail("bob is offered to delete alice's message")
		}
	})

	t.Run("Reactions", func(t *testing.T) {
		begin(t)
		alice.send("pizza on friday?")
		bob.waitMessage("pizza on friday?")
		bob.messageAction("pizza on friday?", "act-react")
		bob.waitFor("the picker", `!!document.querySelector('#emoji-picker')`)
		bob.click(`#emoji-picker button[data-emoji="👍"]`)
		chip := func(*tab) string {
			return fmt.Sprintf(`%s?.querySelector('.reaction[data-emoji="👍"]')`, msgExpr("pizza on friday?"))
		}
		alice.waitFor("bob's reaction", chip(alice)+`?.dataset.count === '1'`)
		if title := alice.evalString(chip(alice) + `.title`); title != "Bob Baker reacted with 👍" {
			alice.fail("hover title %q", title)
		}
		alice.click(`#messages .reaction[data-emoji="👍"]`)
		for _, p := range ppl {
			p.waitFor("two reactions", chip(p)+`?.dataset.count === '2'`)
		}
		if title := bob.evalString(chip(bob) + `.title`); title != "You and Alice Archer reacted with 👍" {
			bob.fail("hover title %q", title)
		}
		if bob.evalString(chip(bob)+`.getAttribute('aria-pressed')`) != "true" {
			bob.fail("bob's own reaction is not marked as his")
		}
		// Bob takes his back.
		bob.click(`#messages .reaction[data-emoji="👍"]`)
		alice.waitFor("one reaction left", chip(alice)+`?.dataset.count === '1' && `+chip(alice)+`.title === 'You reacted with 👍'`)
		bob.waitFor("bob's chip off", chip(bob)+`?.getAttribute('aria-pressed') === 'false'`)
	})

	t.Run("ReplyAndJump", func(t *testing.T) {
		begin(t)
		alice.send("who has the release notes?")
		bob.waitMessage("who has the release notes?")
		bob.messageAction("who has the release notes?", "act-reply")
		bob.waitFor("the reply bar", `document.querySelector('#composer-context')?.dataset.mode === 'reply' && document.querySelector('.context-quote').textContent === 'who has the release notes?'`)
		// Enough traffic that the question is pages back.
		srv.sendAPI(t, alice.token(), team, "filler", 130)
		bob.waitMessage("filler 130")
		bob.typeInto("#composer-input", "I do, sending them now")
		bob.pressEnter(false)
		bob.waitMessage("I do, sending them now")
		reply := msgExpr("I do, sending them now")
		bob.waitFor("the quote on the sent reply", reply+`.querySelector('.quote .quote-text')?.textContent === 'who has the release notes?'`)
		bob.waitFor("the reply bar gone", `document.querySelector('#composer-context').hidden`)

		// Alice's fresh page holds only the newest messages: the quote is
		// fetched, and a click pages back to the original.
		alice.reload()
		alice.waitMessage("I do, sending them now")
		alice.waitFor("the quote", reply+`.querySelector('.quote .quote-text')?.textContent === 'who has the release notes?' && `+reply+`.querySelector('.quote-sender').textContent === 'Alice Archer'`)
		if alice.evalInt(fmt.Sprintf(`%s ? 1 : 0`, msgExpr("who has the release notes?"))) != 0 {
			alice.fail("the original is loaded already; the jump would not page back")
		}
		// A reaction to a message Alice's page does not hold: ignored live,
		// and there, folded, when the page with it is loaded.
		bob.messageAction("who has the release notes?", "act-react")
		bob.click(`#emoji-picker button[data-emoji="👀"]`)
		bob.waitFor("bob's reaction", msgExpr("who has the release notes?")+`?.querySelector('.reaction[data-emoji="👀"]')?.dataset.count === '1'`)
		alice.click(`#messages .msg[data-seq] .quote`)
		alice.waitFor("the original highlighted on screen", `(e => {
			if (!e || e.querySelector('.msg-body').textContent !== 'who has the release notes?') return false;
			const r = e.getBoundingClientRect(), box = document.querySelector('#messages').getBoundingClientRect();
			return r.top >= box.top && r.bottom <= box.bottom;
		})(document.querySelector('#messages .msg.highlight'))`)
		alice.waitFor("the reaction that came while the message was not loaded", msgExpr("who has the release notes?")+`?.querySelector('.reaction[data-emoji="👀"]')?.title === 'Bob Baker reacted with 👀'`)
		alice.checkOrdered()
		alice.eval(`document.querySelector('#jump-latest').click()`, nil)
	})

	t.Run("Mentions", func(t *testing.T) {
		begin(t)
		bob.eval(`location.hash = '#/'`, nil)
		bob.waitFor("the list view", `!document.querySelector('#chat-title')`)

		alice.focus("#composer-input")
		alice.typeInto("#composer-input", "hey @")
		alice.waitFor("the member list", `(o => o.length === 2 && o[0].dataset.username === 'bob' && o[1].dataset.username === 'all')([...document.querySelectorAll('#mention-popup:not([hidden]) .mention-option')])`)
		alice.pressKey("ArrowDown")
		alice.waitFor("@all chosen", `document.querySelector('#mention-popup .mention-option.active')?.dataset.username === 'all'`)
		alice.pressKey("ArrowUp")
		alice.waitFor("bob chosen", `document.querySelector('#mention-popup .mention-option.active')?.dataset.username === 'bob'`)
		alice.typeInto("#composer-input", "bo")
		alice.waitFor("only bob", `document.querySelectorAll('#mention-popup .mention-option').length === 1`)
		alice.pressKey("Tab")
		alice.waitFor("the completed name", `document.querySelector('#composer-input').value === 'hey @bob ' && document.querySelector('#mention-popup').hidden`)
		alice.typeInto("#composer-input", "can you look at this?")
		alice.pressEnter(false)
		alice.waitMessage("hey @bob can you look at this?")
		alice.send("and an ordinary one")

		// Bob's list shows the mention apart from the unread count.
		bob.waitUnread("Team", 2)
		bob.waitFor("the mention badge", convLink("Team")+`.querySelector('.conv-mentions')?.textContent === '@1'`)
		bob.saveScreenshot("mention-badge.png")
		bob.openConv("Team")
		m := msgExpr("hey @bob can you look at this?")
		bob.waitFor("the highlighted mention", m+`?.classList.contains('mentioned') && `+m+`.querySelector('.mention.mention-me')?.textContent === '@bob'`)
		bob.waitUnread("Team", 0)
		bob.waitFor("the mention badge gone", `!`+convLink("Team")+`.querySelector('.conv-mentions')`)
		// Alice's own copy names Bob but is not a mention of her.
		alice.waitFor("the mention in alice's copy", m+`?.querySelector('.mention:not(.mention-me)')?.textContent === '@bob' && !`+m+`.classList.contains('mentioned')`)
	})

	t.Run("Search", func(t *testing.T) {
		begin(t)
		bob.send("the zebrafish results are in <img src=x id=injected>")
		alice.waitMessage("the zebrafish results are in <img src=x id=injected>")
		srv.sendAPI(t, alice.token(), team, "later", 150)
		alice.waitMessage("later 150")
		// A fresh page on the direct conversation: the hit is far back in
		// another conversation.
		alice.reload()
		alice.openConv("Bob Baker")
		alice.typeInto("#search-input", "zebrafish")
		alice.pressEnter(false)
		res := `document.querySelector('#search-results .search-result')`
		alice.waitFor("a result", res+`?.querySelector('.result-conv').textContent === 'Team'`)
		if got := alice.evalString(res + `.querySelector('.result-sender').textContent`); got != "Bob Baker" {
			alice.fail("result sender %q", got)
		}
		if got := alice.evalString(res + `.querySelector('.result-snippet mark')?.textContent || ''`); !strings.EqualFold(got, "zebrafish") {
			alice.fail("highlighted part of the snippet %q", got)
		}
		if alice.evalInt(`document.querySelectorAll('#injected, #search-results img').length`) != 0 {
			alice.fail("the snippet was parsed as HTML")
		}
		alice.saveScreenshot("search.png")

		// The 150 "later" messages come 30 at a time, newest first, each
		// once, through "More results" (the answer's cursor).
		alice.eval(`document.querySelector('#search-input').value = ''`, nil)
		alice.typeInto("#search-input", "later")
		alice.pressEnter(false)
		alice.waitFor("the first page", `document.querySelector('#search-status').textContent === '30+ results for “later”' && !!document.querySelector('#search-more')`)
		alice.eval(`document.querySelector('#search-more').scrollIntoView()`, nil)
		alice.saveScreenshot("search-more.png")
		for page := 2; page <= 5; page++ {
			alice.click("#search-more")
			alice.waitFor(fmt.Sprintf("page %d", page), fmt.Sprintf(`document.querySelectorAll('#search-results .search-result').length === %d`, page*30))
		}
		alice.waitFor("all of them, and no more button", `document.querySelector('#search-status').textContent === '150 results for “later”' && !document.querySelector('#search-more')`)
		got := alice.evalString(`[...document.querySelectorAll('#search-results .result-snippet')].map(e => e.textContent).join('|')`)
		var want []string
		for i := 150; i >= 1; i-- {
			want = append(want, "later "+strconv.Itoa(i))
		}
		if got != strings.Join(want, "|") {
			alice.fail("paged results %.200q…, want later 150 down to later 1", got)
		}
		alice.eval(`document.querySelector('#search-input').value = ''`, nil)
		alice.typeInto("#search-input", "zebrafish")
		alice.pressEnter(false)
		alice.waitFor("the zebrafish result again", `document.querySelectorAll('#search-results .search-result').length === 1`)
		alice.click("#search-results .search-result")
		alice.waitFor("the conversation open at the hit", `document.querySelector('#chat-title')?.textContent === 'Team' && (e => {
			if (!e || !e.querySelector('.msg-body').textContent.startsWith('the zebrafish')) return false;
			const r = e.getBoundingClientRect(), box = document.querySelector('#messages').getBoundingClientRect();
			return r.top >= box.top && r.bottom <= box.bottom;
		})(document.querySelector('#messages .msg.highlight'))`)
		alice.checkOrdered()
		alice.click("#search-close")
		alice.waitFor("the list back", `document.querySelector('#search-panel').hidden && !!`+convLink("Team"))
		alice.eval(`document.querySelector('#jump-latest').click()`, nil)
	})

	t.Run("Typing", func(t *testing.T) {
		begin(t)
		// The server relays one typing frame per user and conversation in
		// 3 s: start past the window of what earlier subtests typed here.
		time.Sleep(3200 * time.Millisecond)
		alice.focus("#composer-input")
		alice.typeInto("#composer-input", "thinking about it")
		bob.waitFor("the typing line", `document.querySelector('#typing').textContent === 'Alice Archer is typing…'`)
		bob.saveScreenshot("typing.png")
		// Nobody types to themselves.
		if got := alice.evalString(`document.querySelector('#typing').textContent`); got != "" {
			alice.fail("alice sees %q", got)
		}
		// It ends by itself after a few seconds without typing...
		bob.waitFor("the typing line gone", `document.querySelector('#typing').textContent === ''`)
		// ...or at once when the message comes.
		alice.typeInto("#composer-input", "!")
		bob.waitFor("the typing line again", `document.querySelector('#typing').textContent === 'Alice Archer is typing…'`)
		alice.pressEnter(false)
		bob.waitMessage("thinking about it!")
		if got := bob.evalString(`document.querySelector('#typing').textContent`); got != "" {
			bob.fail("still typing after the message came: %q", got)
		}
	})

	t.Run("Presence", func(t *testing.T) {
		begin(t)
		dot := convLink("Alice Archer") + `.querySelector('.presence-dot')`
		bob.waitFor("alice online in the list", dot+`?.classList.contains('online')`)
		bob.click("#details-btn")
		aliceID := alice.evalString(`JSON.parse(localStorage.getItem('imserver.user')).id`)
		bob.waitFor("alice online in the member list", fmt.Sprintf(`document.querySelector('#member-list .member[data-user-id=%s]')?.dataset.online === 'true'`, jsString(aliceID)))
		bob.click("#details-dialog .close")

		// Alice closes her tab: offline after the server's grace.
		alice.do(chromedp.Navigate("about:blank"))
		bob.waitFor("alice offline", dot+` && !`+dot+`.classList.contains('online')`)
		alice.do(chromedp.Navigate(srv.URL + "/"))
		alice.waitOnline()
		bob.waitFor("alice online again", dot+`?.classList.contains('online')`)
		alice.openConv("Team")
	})

	t.Run("OfflineCatchUp", func(t *testing.T) {
		begin(t)
		alice.send("edit me later")
		alice.send("delete me later")
		alice.send("react to me later")
		bob.waitMessage("react to me later")
		n := len(bob.messages())

		bob.setOffline(true)
		t.Cleanup(func() { bob.setOffline(false) })
		bob.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
		alice.messageAction("edit me later", "act-edit")
		alice.eval(`document.querySelector('#composer-input').select()`, nil)
		alice.typeInto("#composer-input", "edited while bob was away")
		alice.pressEnter(false)
		alice.waitMessage("edited while bob was away")
		deleted := fmt.Sprintf(`document.querySelector('#messages .msg[data-seq="%d"]')?.classList.contains('deleted')`, alice.evalInt(`Number(`+msgExpr("delete me later")+`.dataset.seq)`))
		alice.messageAction("delete me later", "act-delete")
		alice.click("#confirm-ok")
		alice.waitFor("the delete", deleted)
		alice.messageAction("react to me later", "act-react")
		alice.click(`#emoji-picker button[data-emoji="🎉"]`)
		alice.waitFor("the reaction", msgExpr("react to me later")+`?.querySelector('.reaction[data-emoji="🎉"]')?.dataset.count === '1'`)
		if strings.Contains(bob.evalString(`document.querySelector('#messages').textContent`), "edited while bob was away") {
			bob.fail("an offline tab got the edit")
		}

		bob.setOffline(false)
		bob.waitOnline()
		bob.waitMessage("edited while bob was away")
		bob.waitFor("the delete applied", deleted+` && !document.querySelector('#messages').textContent.includes('delete me later')`)
		bob.waitFor("the reaction applied", msgExpr("react to me later")+`?.querySelector('.reaction[data-emoji="🎉"]')?.title === 'Alice Archer reacted with 🎉'`)
		if got := len(bob.checkOrdered()); got != n {
			bob.fail("%d messages after catching up, want %d (mutations are not messages to show)", got, n)
		}
		bob.waitUnread("Team", 0)
	})

	t.Run("Layout", func(t *testing.T) {
		begin(t)
		// A screen with everything on it: a reply, reactions, an edit, a
		// deletion, a mention, someone typing.
		alice.send("shall we ship on monday?")
		bob.waitMessage("shall we ship on monday?")
		bob.messageAction("shall we ship on monday?", "act-react")
		bob.click(`#emoji-picker button[data-emoji="🎉"]`)
		bob.messageAction("shall we ship on monday?", "act-reply")
		bob.typeInto("#composer-input", "@alice yes, monday works for me")
		bob.pressEnter(false)
		alice.waitMessage("@alice yes, monday works for me")
		alice.messageAction("@alice yes, monday works for me", "act-react")
		alice.click(`#emoji-picker button[data-emoji="❤️"]`)
		bob.waitFor("the heart", `!!document.querySelector('#messages .reaction[data-emoji="❤️"]')`)
		alice.eval(`document.querySelector('#messages').scrollTop = 1e9`, nil)
		alice.saveScreenshot("team-light.png")
		alice.darkMode(true)
		alice.saveScreenshot("team-dark.png")
		alice.viewport(390, 844, true)
		alice.waitFor("the phone layout", `getComputedStyle(document.querySelector('.sidebar')).display === 'none'`)
		alice.eval(`document.querySelector('#messages').scrollTop = 1e9`, nil)
		// A tap shows the actions of a message on a touch screen.
		alice.tapMessage("@alice yes, monday works for me")
		alice.waitFor("the actions shown", msgExpr("@alice yes, monday works for me")+`.querySelector('.msg-actions').getBoundingClientRect().width > 0`)
		alice.saveScreenshot("team-phone-dark.png")
		alice.darkMode(false)
		alice.saveScreenshot("team-phone.png")
		// Nothing wider than the screen.
		if w := alice.evalInt(`document.documentElement.scrollWidth`); w > 390 {
			alice.fail("the page is %dpx wide on a 390px screen", w)
		}
		alice.desktop()
	})
}

// use makes a subtest's failures show the tabs' screenshots and logs under
// the subtest's name.
func use(t *testing.T, tabs ...*tab) {
	for _, p := range tabs {
		prev := p.t
		p.t = t
		t.Cleanup(func() { p.t = prev })
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// msgExpr finds the stored message whose body is body in the open conversation.
func msgExpr(body string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq]')].find(e => e.querySelector('.msg-body').textContent === %s)`, jsString(body))
}

func (b *tab) reload() {
	b.t.Helper()
	b.do(chromedp.Reload())
	b.waitOnline()
}

func (b *tab) focus(sel string) {
	b.t.Helper()
	b.do(chromedp.Focus(chromedp.CSS(sel)))
}

// pressKey sends one key press (ArrowUp, ArrowDown, Escape, Tab) to the
// focused element.
func (b *tab) pressKey(key string) {
	b.t.Helper()
	codes := map[string]int64{"ArrowUp": 38, "ArrowDown": 40, "Escape": 27, "Tab": 9}
	vk, ok := codes[key]
	if !ok {
		b.t.Fatalf("pressKey: no code for %q", key)
	}
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: key, Code: key, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
}

// center is the middle of the element that a JavaScript expression finds,
// once it is on screen and stands still.
func (b *tab) center(what, expr string) (float64, float64) {
	b.t.Helper()
	b.waitFor(what+" in place", fmt.Sprintf(`(() => {
		const el = %s;
		if (!el) return false;
		el.scrollIntoView({block: 'nearest'});
		const r = el.getBoundingClientRect();
		const now = [r.x, r.y, r.width, r.height].join(',');
		const still = window.__e2eCenter === now;
		window.__e2eCenter = now;
		return still && r.width > 0 && r.height > 0;
	})()`, expr))
	var xy []float64
	b.eval(fmt.Sprintf(`(r => [r.x + r.width / 2, r.y + r.height / 2])(%s.getBoundingClientRect())`, expr), &xy)
	return xy[0], xy[1]
}

// messageAction points the mouse at a message, which shows its actions,
// and clicks one of them (act-edit, act-delete, act-react, act-reply).
// A message whose receipt changes meanwhile is drawn again, and the new
// element is not hovered until the mouse moves: then the click lands on the
// bubble, and it is tried again.
func (b *tab) messageAction(body, action string) {
	b.t.Helper()
	m := msgExpr(body)
	for try := 0; ; try++ {
		x, y := b.center("message "+body, m+`?.querySelector('.bubble')`)
		b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			for _, dx := range []float64{-1, 0} {
				p := input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: x + dx, Y: y}
				if _, err := cdp.Call(ctx, t, input.DispatchMouseEvent, p); err != nil {
					return err
				}
			}
			return nil
		}))
		x, y = b.center(action+" of "+body, fmt.Sprintf(`%s?.querySelector('.%s')`, m, action))
		b.eval(fmt.Sprintf(`window.__e2eActed = false; document.addEventListener('click', e => { window.__e2eActed = !!e.target.closest('.%s'); }, {capture: true, once: true})`, action), nil)
		b.do(chromedp.MouseClickXY(x, y))
		var ok bool
		b.eval(`window.__e2eActed`, &ok)
		if ok {
			return
		}
		if try == 3 {
			b.fail("clicking %s of %q: the click did not reach the button", action, body)
		}
	}
}

// tapMessage taps a message's bubble as a finger would.
func (b *tab) tapMessage(body string) {
	b.t.Helper()
	x, y := b.center("message "+body, msgExpr(body)+`?.querySelector('.msg-body')`)
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchTouchEventType{input.DispatchTouchEventTypeTouchStart, input.DispatchTouchEventTypeTouchEnd} {
			pts := []*input.TouchPoint{{X: x, Y: y}}
			if typ == input.DispatchTouchEventTypeTouchEnd {
				pts = []*input.TouchPoint{}
			}
			if _, err := cdp.Call(ctx, t, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: typ, TouchPoints: pts}); err != nil {
				return err
			}
		}
		return nil
	}))
}
