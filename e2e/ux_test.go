package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Defects of a UI review in Chromium, each shown as the person meets it:
// the composer keeps text that could not be sent or saved, drafts (with
// their reply target) survive switching conversations and reloads, the
// conversation list agrees with the server after a reconnect and puts new
// conversations on top, dark mode's red is readable, right-to-left text
// runs right to left, long names wrap, and the emoji picker closes when
// focus leaves it. The subtests share one server and its people.
func TestComposerAndListReview(t *testing.T) {
	srv := startServer(t, "storm: {threshold: 0}\n")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	at, bt := alice.token(), bob.token()
	aliceID, bobID := userID(t, srv, at), userID(t, srv, bt)
	var g struct{ Conversation apiConv }
	srv.call(t, at, "POST", "/groups", map[string]any{"name": "Team", "member_ids": []string{bobID}}, &g)
	team := g.Conversation.ID
	srv.call(t, at, "POST", "/conversations/direct", map[string]any{"user_id": bobID}, nil)
	srv.sendAPI(t, bt, team, "hello from bob", 1)
	alice.openConv("Team")
	alice.waitMessage("hello from bob 1")
	ppl := []*tab{alice, bob}
	// begin undoes what a failed subtest may have left: no one offline,
	// no dialog open, an empty composer.
	begin := func(t *testing.T) {
		use(t, ppl...)
		for _, p := range ppl {
			if p.evalString(`document.querySelector('#conn-state')?.dataset.state ?? ''`) != "online" {
				p.setOffline(false)
				p.waitOnline()
			}
			p.eval(`document.querySelectorAll('dialog').forEach(d => d.close())`, nil)
		}
		alice.eval(`document.querySelector('#context-cancel')?.click(); (i => { i.value = ''; i.dispatchEvent(new Event('input')); })(document.querySelector('#composer-input'))`, nil)
	}
	composer := `document.querySelector('#composer-input').value`
	setComposer := func(p *tab, expr string) {
		p.focus("#composer-input")
		p.eval(fmt.Sprintf(`(i => { i.value = %s; i.dispatchEvent(new Event('input')); })(document.querySelector('#composer-input'))`, expr), nil)
	}

	t.Run("FailedEditKeepsText", func(t *testing.T) {
		begin(t)
		alice.send("original text")
		alice.setOffline(true)
		alice.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
		alice.focus("#composer-input")
		alice.pressKey("ArrowUp")
		alice.waitFor("the edit mode", `document.querySelector('#composer-context')?.dataset.mode === 'edit'`)
		setComposer(alice, `'a carefully rewritten text'`)
		alice.pressEnter(false)
		alice.waitFor("the edit's error", `(e => e?.hidden === false && e.textContent.includes('Could not save the edit'))(document.querySelector('#composer-error'))`)
		if got := alice.evalString(composer); got != "a carefully rewritten text" {
			alice.fail("the composer holds %q after the failed edit", got)
		}
		if alice.evalString(`document.querySelector('#composer-context').dataset.mode`) != "edit" || alice.evalString(`document.querySelector('#send-btn').textContent`) != "Save" {
			alice.fail("the failed edit left edit mode")
		}

		// Back online, the same Enter saves it and only then ends the edit.
		alice.setOffline(false)
		alice.waitOnline()
		alice.pressEnter(false)
		alice.waitMessage("a carefully rewritten text")
		alice.waitFor("the composer back to normal", `document.querySelector('#composer-context').hidden && document.querySelector('#composer-error').hidden && document.querySelector('#composer-input').value === ''`)
		bob.openConv("Team")
		bob.waitMessage("a carefully rewritten text")
	})

	t.Run("TooLongIsKept", func(t *testing.T) {
		begin(t)
		setComposer(alice, `'x'.repeat(17000)`)
		alice.pressEnter(false)
		alice.waitFor("the length error", `(e => e?.hidden === false && e.textContent.includes('616 characters over the limit of 16,384 bytes'))(document.querySelector('#composer-error'))`)
		if n := alice.evalInt(composer + `.length`); n != 17000 {
			alice.fail("the composer holds %d characters, want the 17000 typed", n)
		}
		if n := alice.evalInt(`document.querySelectorAll('#messages .msg.pending').length`); n != 0 {
			alice.fail("the long message was sent anyway")
		}
		// Multi-byte text counts in bytes; shortened, it goes.
		setComposer(alice, `'é'.repeat(8200)`)
		alice.pressEnter(false)
		alice.waitFor("the byte count", `document.querySelector('#composer-error').textContent.includes('16 bytes over')`)
		setComposer(alice, `'x'.repeat(16384)`)
		alice.waitFor("the error gone once it fits", `document.querySelector('#composer-error').hidden`)
		alice.pressEnter(false)
		alice.waitFor("the message at the limit stored", fmt.Sprintf(`!!%s`, msgExpr(strings.Repeat("x", 16384))))

		// An edit is checked too, and stays in edit mode.
		alice.focus("#composer-input")
		alice.pressKey("ArrowUp")
		alice.waitFor("the edit mode", `document.querySelector('#composer-context')?.dataset.mode === 'edit'`)
		setComposer(alice, `'y'.repeat(17000)`)
		alice.pressEnter(false)
		alice.waitFor("the length error of the edit", `!document.querySelector('#composer-error').hidden && document.querySelector('#composer-context').dataset.mode === 'edit'`)
		alice.pressKey("Escape")
	})

	t.Run("DraftWithReplySurvives", func(t *testing.T) {
		begin(t)
		srv.sendAPI(t, bt, team, "question from bob", 1)
		alice.waitMessage("question from bob 1")
		seq := alice.evalInt(`Number(` + msgExpr("question from bob 1") + `.dataset.seq)`)
		alice.messageAction("question from bob 1", "act-reply")
		alice.waitFor("the reply mode", `document.querySelector('#composer-context')?.dataset.mode === 'reply'`)
		alice.typeInto("#composer-input", "my unfinished answer")
		check := func(when string) {
			alice.t.Helper()
			alice.waitFor("the draft "+when, fmt.Sprintf(`%s === 'my unfinished answer'`, composer))
			alice.waitFor("the reply target "+when, fmt.Sprintf(`(e => !e.hidden && e.dataset.mode === 'reply' && e.dataset.replyTo === '%d' && e.textContent.includes('question from bob 1'))(document.querySelector('#composer-context'))`, seq))
		}
		alice.openConv("Bob Baker")
		if got := alice.evalString(composer); got != "" {
			alice.fail("the other conversation shows the draft %q", got)
		}
		alice.openConv("Team")
		check("after switching back")
		alice.reload()
		alice.openConv("Team")
		check("after a reload")

		// Kept under the user's key only.
		var keys []string
		alice.eval(`Object.keys(localStorage).filter(k => k.includes('draft'))`, &keys)
		if want := "imserver.drafts." + aliceID; len(keys) != 1 || keys[0] != want {
			alice.fail("draft keys %q, want only %q", keys, want)
		}
		// Sent, it is a reply, and the draft is gone.
		alice.focus("#composer-input")
		alice.pressEnter(false)
		alice.waitFor("the reply stored", fmt.Sprintf(`%s?.querySelector('.quote')?.dataset.replyTo === '%d'`, msgExpr("my unfinished answer"), seq))
		if s := alice.evalString(`localStorage.getItem('imserver.drafts.` + aliceID + `') ?? ''`); s != "" {
			alice.fail("the sent draft is still stored: %s", s)
		}
		// Emptied, it is gone too.
		alice.typeInto("#composer-input", "x")
		alice.waitFor("the draft stored", `!!localStorage.getItem('imserver.drafts.`+aliceID+`')`)
		setComposer(alice, `''`)
		alice.waitFor("the empty draft removed", `!localStorage.getItem('imserver.drafts.`+aliceID+`')`)
	})

	t.Run("PreviewAfterReconnect", func(t *testing.T) {
		begin(t)
		bob.openConv("Alice Archer")
		bob.setOffline(true)
		bob.waitFor("the offline state", `document.querySelector('#conn-state').dataset.state === 'offline'`)
		srv.sendAPI(t, at, team, "while away", 2)
		var m struct{ Message struct{ Seq int64 } }
		srv.call(t, at, "POST", "/conversations/"+team+"/messages", map[string]any{"client_msg_id": "gone-1", "body": "deleted while away"}, &m)
		srv.call(t, at, "POST", "/conversations/"+team+"/messages", map[string]any{"client_msg_id": "gone-2", "kind": "delete", "target": m.Message.Seq, "body": ""}, nil)
		var list struct {
			Conversations []struct {
				ID          string `json:"id"`
				LastMessage struct {
					Body string `json:"body"`
				} `json:"last_message"`
			} `json:"conversations"`
		}
		srv.call(t, bt, "GET", "/conversations?since=0&limit=100", nil, &list)
		want := ""
		for _, c := range list.Conversations {
			if c.ID == team {
				want = "Alice Archer: " + c.LastMessage.Body
			}
		}
		if want != "Alice Archer: while away 2" {
			t.Fatalf("the server's last message: %q", want)
		}
		bob.setOffline(false)
		bob.waitOnline()
		preview := convLink("Team") + `?.querySelector('.conv-preview').textContent`
		bob.waitFor("the server's preview", fmt.Sprintf(`%s === %s`, preview, jsString(want)))
		// The catch-up pull of the group runs after the list: it must not
		// bring the deleted message back as the preview.
		time.Sleep(1500 * time.Millisecond)
		if got := bob.evalString(preview); got != want {
			bob.fail("after the catch-up the preview is %q, the server says %q", got, want)
		}
	})

	// Carol, with a long name, starts a group with Bob and writes nothing.
	var reg struct{ Token string }
	long := "Carolinaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	srv.call(t, "", "POST", "/auth/register", map[string]any{"username": "carol", "password": "correct horse carol", "display_name": long}, &reg)

	t.Run("NewConversationOnTop", func(t *testing.T) {
		begin(t)
		first := `document.querySelector('.conv-item .conv-name')?.textContent`
		bob.waitFor("a conversation with messages on top", first+` !== 'Fresh group'`)
		srv.call(t, reg.Token, "POST", "/groups", map[string]any{"name": "Fresh group", "member_ids": []string{bobID}}, nil)
		bob.waitFor("the new group on top", first+` === 'Fresh group'`)
		bob.reload()
		bob.waitFor("the new group on top after a reload", first+` === 'Fresh group'`)
		// A message elsewhere puts that conversation above it again.
		srv.sendAPI(t, at, team, "later", 1)
		bob.waitFor("the newer message on top", first+` === 'Team'`)
	})

	t.Run("LongNameInDetails", func(t *testing.T) {
		begin(t)
		bob.viewport(375, 740, true)
		defer bob.desktop()
		bob.openConv("Fresh group")
		bob.click("#details-btn")
		row := `document.querySelector('#member-list .member[data-role="owner"]')`
		bob.waitFor("carol in the details", row+`?.querySelector('.person-name')?.textContent === `+jsString(long))
		var r struct {
			Overlap  bool `json:"overlap"`
			Overflow bool `json:"overflow"`
		}
		bob.eval(fmt.Sprintf(`(row => {
			const name = row.querySelector('.person-name'), role = row.querySelector('.role');
			const a = name.getBoundingClientRect(), b = role.getBoundingClientRect();
			const overlap = a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
			const dlg = row.closest('dialog').getBoundingClientRect();
			return {overlap, overflow: name.scrollWidth > name.clientWidth + 1 || a.right > dlg.right};
		})(%s)`, row), &r)
		if r.Overlap || r.Overflow {
			bob.fail("the long name runs over: %+v", r)
		}
		bob.pressKey("Escape")
		bob.waitFor("the details closed", `!document.querySelector('dialog[open]')`)
	})

	t.Run("DarkDangerContrast", func(t *testing.T) {
		begin(t)
		bob.darkMode(true)
		defer bob.darkMode(false)
		var low []string
		bob.eval(`(() => {
			const rgb = (v) => { const e = document.createElement('span'); e.style.color = v; document.body.append(e); const c = getComputedStyle(e).color.match(/[\d.]+/g).map(Number); e.remove(); return c; };
			const lum = (c) => { const f = (v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
			const ratio = (a, b) => { const x = lum(rgb(a)), y = lum(rgb(b)); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
			const out = [];
			for (const bg of ['--bg', '--panel', '--own', '--other', '--accent-soft', '--warn-bg', '--mention-bg']) {
				const r = ratio('var(--danger)', 'var(' + bg + ')');
				if (r < 4.5) out.push('--danger on ' + bg + ': ' + r.toFixed(2));
			}
			const r = ratio('#fff', 'var(--danger-fill, var(--danger))');
			if (r < 4.5) out.push('white on the danger fill: ' + r.toFixed(2));
			return out;
		})()`, &low)
		if len(low) > 0 {
			bob.fail("low contrast in dark mode: %v", low)
		}
	})

	t.Run("RightToLeft", func(t *testing.T) {
		begin(t)
		bob.openConv("Team")
		srv.call(t, at, "POST", "/conversations/"+team+"/messages", map[string]any{"client_msg_id": "rtl-1", "body": "שלום עולם!"}, nil)
		bob.waitMessage("שלום עולם!")
		bob.waitFor("the preview", convLink("Team")+`?.querySelector('.conv-preview').textContent.endsWith('שלום עולם!')`)
		var dirs map[string]string
		bob.eval(fmt.Sprintf(`({
			body: getComputedStyle(%s.querySelector('.msg-body')).direction,
			preview: getComputedStyle(%s.querySelector('.conv-preview')).direction,
		})`, msgExpr("שלום עולם!"), convLink("Team")), &dirs)
		if dirs["body"] != "rtl" {
			bob.fail("the Hebrew message runs %s", dirs["body"])
		}
		// The preview starts with the sender's name ("Alice Archer: "), so
		// it is left to right; what matters is that it decides by itself.
		var auto []string
		bob.eval(`['.conv-name', '.conv-preview', '#messages .sender', '#messages .msg-body', '#chat-title'].filter(s => [...document.querySelectorAll(s)].some(e => e.getAttribute('dir') !== 'auto'))`, &auto)
		if len(auto) > 0 {
			bob.fail("without dir=auto: %v", auto)
		}
	})

	t.Run("PickerClosesOnTabOut", func(t *testing.T) {
		begin(t)
		alice.messageAction("hello from bob 1", "act-react")
		alice.waitFor("the picker", `!!document.activeElement?.closest('#emoji-picker')`)
		alice.pressKey("Tab")
		if alice.evalString(`document.activeElement?.closest('#emoji-picker') ? 'in' : 'out'`) != "in" {
			alice.fail("Tab inside the picker closed it")
		}
		for range 8 {
			alice.pressKey("Tab")
		}
		alice.waitFor("the picker closed", `!document.querySelector('#emoji-picker')`)
	})

	t.Run("LogoutClearsDrafts", func(t *testing.T) {
		begin(t)
		alice.typeInto("#composer-input", "a private draft")
		alice.waitFor("the draft stored", `!!localStorage.getItem('imserver.drafts.`+aliceID+`')`)
		alice.click("#logout-btn")
		alice.waitFor("the login screen", `!!document.querySelector('#auth-form')`)
		if n := alice.evalInt(`Object.keys(localStorage).filter(k => k.includes('draft')).length`); n != 0 {
			alice.fail("%d drafts stored after logout", n)
		}
	})
}

func userID(t *testing.T, srv *server, token string) string {
	t.Helper()
	var me struct{ User struct{ ID string } }
	srv.call(t, token, "GET", "/me", nil, &me)
	return me.User.ID
}
