package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	actionTimeout = 20 * time.Second
	waitTimeout   = 15 * time.Second
)

// tab is one browser tab. Tabs made by newPerson live in a browser context
// of their own (own localStorage: a different person or device); sibling
// tabs share it (the same person in two tabs).
type tab struct {
	t    *testing.T
	name string
	srv  *server
	ctx  context.Context

	mu         sync.Mutex
	console    []string
	exceptions []string
}

func newPerson(t *testing.T, srv *server, name string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	return openTab(t, srv, name, ctx)
}

// newUser is newPerson registered as username, with a display name.
func newUser(t *testing.T, srv *server, username, display string) *tab {
	t.Helper()
	p := newPerson(t, srv, username)
	p.register(username, display)
	return p
}

// sibling opens another tab of the same person.
func (b *tab) sibling(name string) *tab {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	return openTab(b.t, b.srv, name, ctx)
}

func openTab(t *testing.T, srv *server, name string, ctx context.Context) *tab {
	t.Helper()
	b := &tab{t: t, name: name, srv: srv, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("%s: opening a tab: %v", name, err)
	}
	consoleEvents := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	exceptionEvents := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range consoleEvents {
			if err != nil {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				if a.Value != nil {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			b.mu.Lock()
			b.console = append(b.console, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
			b.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range exceptionEvents {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, text)
			b.mu.Unlock()
		}
	}()
	// Every tab acts as the focused window: read markers are only sent
	// for a visible, focused page, and headless windows have no focus.
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatalf("%s: focus emulation: %v", name, err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.exceptions) > 0 {
			t.Errorf("%s: uncaught JavaScript exceptions:\n%s", name, strings.Join(b.exceptions, "\n"))
		}
		if t.Failed() && len(b.console) > 0 {
			t.Logf("%s console:\n%s", name, tail(strings.Join(b.console, "\n"), 4000))
		}
	})
	return b
}

// fail saves a screenshot of the tab and stops the test.
func (b *tab) fail(format string, args ...any) {
	b.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if path, err := b.screenshot(fmt.Sprintf("failed-%s-%s.png", sanitize(b.t.Name()), b.name)); err == nil {
		msg += "\nscreenshot: " + path
	}
	b.t.Fatalf("%s: %s", b.name, msg)
}

func sanitize(s string) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(s)
}

func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail("%v", err)
	}
}

// eval runs a JavaScript expression and decodes its value into out.
func (b *tab) eval(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		b.fail("evaluating %s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.fail("decoding %s from %s: %v", raw, expr, err)
		}
	}
}

func (b *tab) evalString(expr string) string {
	b.t.Helper()
	var s string
	b.eval(expr, &s)
	return s
}

// waitFor polls a JavaScript condition until it is true. A page that
// reloads meanwhile (its JavaScript context goes away) is polled again.
func (b *tab) waitFor(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			left = time.Millisecond
		}
		ctx, cancel := context.WithTimeout(b.ctx, left+5*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
			chromedp.WithPollingInterval(50*time.Millisecond),
			chromedp.WithPollingTimeout(left)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "context") {
			b.fail("waiting for %s: %v\npage: %s", what, err, b.pageState())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pageState describes the page for a failure message: a wait that times
// out on a page that never loaded reads differently from one on a page
// that shows something else.
func (b *tab) pageState() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({href: location.href, readyState: document.readyState, text: (document.body?.innerText ?? '').slice(0, 300)})`))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return s
}

// click clicks an element once it stands still: dialogs fill in lists
// asynchronously, and a click aimed at a button that moves meanwhile lands
// next to it.
func (b *tab) click(sel string) {
	b.t.Helper()
	b.waitFor(sel+" in place", fmt.Sprintf(`(() => {
		const el = document.querySelector(%s);
		if (!el) return false;
		const r = el.getBoundingClientRect();
		const now = [r.x, r.y, r.width, r.height].join(',');
		const rects = (window.__e2eRects ??= {});
		const still = rects[%[1]s] === now;
		rects[%[1]s] = now;
		return still && r.width > 0 && r.height > 0;
	})()`, jsString(sel)))
	// The element may be drawn again between the query and the click (a
	// list re-rendered by a presence or entry frame): the click then
	// finds its node gone, and is made again on the new one.
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if try == 4 || !strings.Contains(err.Error(), "Could not find node with given id") {
			b.fail("%v", err)
			return
		}
	}
}

// typeInto sends real key events; "\n" is the Enter key.
func (b *tab) typeInto(sel, text string) {
	b.t.Helper()
	b.do(chromedp.SendKeys(chromedp.CSS(sel), text))
}

func (b *tab) screenshot(name string) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll("artifacts", 0o755); err != nil {
		return "", err
	}
	path := filepath.Join("artifacts", name)
	return path, os.WriteFile(path, png, 0o644)
}

func (b *tab) saveScreenshot(name string) {
	b.t.Helper()
	path, err := b.screenshot(name)
	if err != nil {
		b.t.Fatalf("%s: screenshot: %v", b.name, err)
	}
	b.t.Logf("screenshot: e2e/%s", path)
}

// setOffline cuts the tab's network (HTTP and WebSocket) and tells the page
// it is offline, or brings both back. With URL patterns only the matching
// requests fail (the page itself can still load).
func (b *tab) setOffline(off bool, patterns ...string) {
	b.t.Helper()
	if len(patterns) == 0 {
		patterns = []string{""}
	}
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		rules := []*network.Conditions{}
		for _, p := range patterns {
			if off {
				rules = append(rules, &network.Conditions{URLPattern: p, Offline: true, DownloadThroughput: -1, UploadThroughput: -1})
			}
		}
		if _, err := cdp.Call(ctx, t, network.EmulateNetworkConditionsByRule, network.EmulateNetworkConditionsByRuleParams{MatchedNetworkConditions: rules}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.OverrideNetworkState, network.OverrideNetworkStateParams{Offline: off, DownloadThroughput: -1, UploadThroughput: -1})
		return err
	}))
}

func (b *tab) viewport(w, h int64, mobile bool) {
	b.t.Helper()
	opts := []chromedp.EmulateViewportOption{}
	if mobile {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	b.do(chromedp.EmulateViewport(w, h, opts...))
}

// --- the app ------------------------------------------------------------------

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// register creates an account through the login screen and waits for the
// live connection.
func (b *tab) register(username, display string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.srv.URL + "/"))
	b.waitFor("the login form", `!!document.querySelector('#auth-form')`)
	b.click("#mode-register")
	b.typeInto("#username", username)
	b.typeInto("#password", "correct horse "+username)
	if display != "" {
		b.typeInto("#display-name", display)
	}
	b.click("#auth-submit")
	b.waitOnline()
}

func (b *tab) login(username string) {
	b.t.Helper()
	b.waitFor("the login form", `!!document.querySelector('#auth-form')`)
	b.typeInto("#username", username)
	b.typeInto("#password", "correct horse "+username)
	b.pressEnter(false)
	b.waitOnline()
}

func (b *tab) waitOnline() {
	b.t.Helper()
	b.waitFor("the live connection", `document.querySelector('#conn-state')?.dataset.state === 'online'`)
}

func (b *tab) token() string {
	b.t.Helper()
	return b.evalString(`localStorage.getItem('imserver.token') || ''`)
}

// convSelector finds a conversation in the list by its shown name.
func convLink(name string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('.conv-item')].find(a => a.querySelector('.conv-name').textContent === %s)`, jsString(name))
}

func (b *tab) waitConv(name string) {
	b.t.Helper()
	b.waitFor("conversation "+name+" in the list", "!!"+convLink(name))
}

// openConv opens a conversation from the list by name, as a click would.
func (b *tab) openConv(name string) {
	b.t.Helper()
	b.waitConv(name)
	b.eval(convLink(name)+".click()", nil)
	b.waitFor("conversation "+name+" open", fmt.Sprintf(`document.querySelector('#chat-title')?.textContent === %s && !!document.querySelector('#messages .history-start, #messages .msg, #messages #load-older')`, jsString(name)))
}

// unread is the unread badge of a conversation in the list (0 without one).
func (b *tab) unreadExpr(name string) string {
	return fmt.Sprintf(`Number((%s)?.querySelector('.conv-unread')?.dataset.unread || 0)`, convLink(name))
}

func (b *tab) waitUnread(name string, n int) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%d unread in %s", n, name), fmt.Sprintf(`%s === %d`, b.unreadExpr(name), n))
}

// press sends one Enter key press to the focused element, as a keyboard
// does: the page can cancel it on keydown. (SendKeys sends "\n" as keydown
// plus a separate char event, which inserts a line break even when keydown
// was cancelled; no real keyboard does that.)
func (b *tab) pressEnter(shift bool) {
	b.t.Helper()
	var mods int64
	if shift {
		mods = int64(chromedp.ModifierShift)
	}
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{
				Type: typ, Key: "Enter", Code: "Enter", Modifiers: mods,
				WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
			}
			if typ == input.DispatchKeyEventTypeKeyDown {
				p.Text, p.UnmodifiedText = "\r", "\r"
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
}

// send types a message and presses Enter.
func (b *tab) send(text string) {
	b.t.Helper()
	b.typeInto("#composer-input", text)
	b.pressEnter(false)
	b.waitFor("message "+text+" stored", fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq] .msg-body')].some(e => e.textContent === %s)`, jsString(text)))
}

type shownMessage struct {
	Seq    int64  `json:"seq"`
	Body   string `json:"body"`
	Status string `json:"status"`
}

// messages lists the stored messages the open conversation shows, in DOM order.
func (b *tab) messages() []shownMessage {
	b.t.Helper()
	var out []shownMessage
	b.eval(`[...document.querySelectorAll('#messages .msg[data-seq]')].map(e => ({seq: Number(e.dataset.seq), body: e.querySelector('.msg-body').textContent, status: e.dataset.status}))`, &out)
	return out
}

func (b *tab) waitMessage(body string) {
	b.t.Helper()
	b.waitFor("message "+body, fmt.Sprintf(`[...document.querySelectorAll('#messages .msg[data-seq] .msg-body')].some(e => e.textContent === %s)`, jsString(body)))
}

// checkOrdered fails when the open conversation shows a seq twice or out of order.
func (b *tab) checkOrdered() []shownMessage {
	b.t.Helper()
	msgs := b.messages()
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Seq <= msgs[i-1].Seq {
			b.fail("messages out of order or duplicated at %d: %+v", i, msgs)
		}
	}
	return msgs
}

func bodies(msgs []shownMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

// receipt is the receipt text under the newest own message.
func (b *tab) waitReceipt(text string) {
	b.t.Helper()
	b.waitFor("receipt "+text, fmt.Sprintf(`document.querySelector('#messages .msg-receipt')?.textContent === %s`, jsString(text)))
}

// pickUser searches in a picker dialog and clicks the person.
func (b *tab) pickUser(input, username string) {
	b.t.Helper()
	b.typeInto(input, username)
	sel := fmt.Sprintf(`%s-results button[data-username=%s]`, input, jsString(username))
	b.waitFor("search result "+username, fmt.Sprintf(`!!document.querySelector(%s)`, jsString(sel)))
	b.click(sel)
}

// newGroup creates a group named name with member (a username) from the
// new-group dialog and waits until it is open.
func (b *tab) newGroup(name, member string) {
	b.t.Helper()
	b.click("#new-group")
	b.typeInto("#group-name", name)
	b.pickUser("#group-search", member)
	b.waitFor(member+" chosen and the results settled", `document.querySelectorAll('#group-chosen .chip').length === 1 && document.querySelectorAll('#group-search-results button').length === 0`)
	b.click("#group-create")
	b.waitFor("the group open", fmt.Sprintf(`document.querySelector('#chat-title')?.textContent === %s`, jsString(name)))
}

// darkMode makes the page see prefers-color-scheme: dark.
func (b *tab) darkMode(on bool) {
	b.t.Helper()
	features := []*emulation.MediaFeature{}
	if on {
		features = append(features, &emulation.MediaFeature{Name: "prefers-color-scheme", Value: "dark"})
	}
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features}); err != nil {
		b.fail("emulating the color scheme: %v", err)
	}
}

// desktop undoes viewport: the window's own size again, no touch.
func (b *tab) desktop() {
	b.t.Helper()
	b.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, emulation.ClearDeviceMetricsOverride, cdp.Empty{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{Enabled: false})
		return err
	}))
}
