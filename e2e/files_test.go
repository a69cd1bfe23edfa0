package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestFileAttachments: Alice attaches an image with the file picker and
// pastes another from the clipboard; Bob sees both inline as thumbnails
// that open the full image; a non-member's request for the file gets 404.
func TestFileAttachments(t *testing.T) {
	srv := startServer(t, "")
	alice := newUser(t, srv, "alice", "Alice Archer")
	bob := newUser(t, srv, "bob", "Bob Baker")
	carol := newPerson(t, srv, "carol")
	carol.register("carol", "")

	alice.click("#new-direct")
	alice.pickUser("#direct-search", "bob")
	alice.waitFor("the new conversation", `document.querySelector('#chat-title')?.textContent === 'Bob Baker'`)

	// The file picker.
	img := image.NewNRGBA(image.Rect(0, 0, 800, 600))
	for y := 0; y < 600; y++ {
		for x := 0; x < 800; x++ {
			img.Set(x, y, color.NRGBA{uint8(x), uint8(y), 128, 255})
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	path := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	alice.do(chromedp.SetUploadFiles(chromedp.CSS(`#file-input`), []string{path}))
	alice.waitFor("the upload", `document.querySelector('#pending-files .pending-file')?.dataset.status === 'ready'`)
	alice.typeInto("#composer-input", "a photo")
	alice.pressEnter(false)
	alice.waitFor("the stored message with its image", `[...document.querySelectorAll('#messages .msg[data-seq]')].some(m => m.querySelector('.msg-body').textContent === 'a photo' && m.querySelector('.attachment.image img'))`)
	alice.waitFor("the composer emptied", `document.querySelector('#pending-files').hidden`)

	// Paste from the clipboard, sent without text.
	alice.evalAwait(`(async () => {
		const c = document.createElement('canvas');
		c.width = 120; c.height = 90;
		const g = c.getContext('2d');
		g.fillStyle = '#c00'; g.fillRect(0, 0, 120, 90);
		const blob = await new Promise((r) => c.toBlob(r, 'image/png'));
		const dt = new DataTransfer();
		dt.items.add(new File([blob], 'image.png', { type: 'image/png' }));
		document.querySelector('#composer-input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
		return true;
	})()`, nil)
	alice.waitFor("the pasted upload", `document.querySelector('#pending-files .pending-file')?.dataset.status === 'ready'`)
	alice.click("#send-btn")
	alice.waitFor("two images", `document.querySelectorAll('#messages .msg[data-seq] .attachment.image img').length === 2`)

	// Bob sees both inline, loaded through their signed links.
	bob.openConv("Alice Archer")
	bob.waitFor("both thumbnails loaded", `(() => {
		const imgs = [...document.querySelectorAll('#messages .msg[data-seq] .attachment.image img')];
		return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0);
	})()`)
	var shown []struct {
		W    int    `json:"w"`
		Href string `json:"href"`
		ID   string `json:"id"`
	}
	bob.eval(`[...document.querySelectorAll('#messages .attachment.image')].map(a => ({w: a.querySelector('img').naturalWidth, href: a.getAttribute('href'), id: a.dataset.file}))`, &shown)
	if len(shown) != 2 || shown[0].W != 400 || shown[1].W != 120 {
		bob.fail("thumbnails: %+v (want 400 and 120 pixels wide)", shown)
	}
	var full int
	bob.evalAwait(fmt.Sprintf(`fetch(%s).then(r => r.ok ? r.arrayBuffer() : null).then(b => b ? b.byteLength : -1)`, jsString(shown[0].Href)), &full)
	if full != buf.Len() {
		bob.fail("the full image: %d bytes, want %d", full, buf.Len())
	}

	// A tab open for hours holds links that expired: a thumbnail that
	// fails to load, and a link clicked, get fresh ones first.
	const stale = `(u) => u.replace(/exp=\d+/, 'exp=1000000000')`
	bob.eval(`(() => {
		const a = document.querySelector('#messages .attachment.image');
		const img = a.querySelector('img');
		a.href = (`+stale+`)(a.getAttribute('href'));
		img.src = (`+stale+`)(img.getAttribute('src'));
		return true;
	})()`, nil)
	bob.waitFor("the thumbnail loaded again through a fresh link", `(() => {
		const a = document.querySelector('#messages .attachment.image');
		const img = a.querySelector('img');
		return !img.src.includes('exp=1000000000') && !a.href.includes('exp=1000000000') && img.complete && img.naturalWidth === 400;
	})()`)
	bob.eval(`(() => {
		const a = document.querySelectorAll('#messages .attachment.image')[1];
		a.href = (`+stale+`)(a.getAttribute('href'));
		return true;
	})()`, nil)
	bob.do(chromedp.Click(chromedp.CSS(`#messages .msg[data-seq]:last-of-type .attachment.image img`)))
	bob.waitFor("the clicked link refreshed", `!document.querySelectorAll('#messages .attachment.image')[1].href.includes('exp=1000000000')`)
	var second int
	bob.evalAwait(`fetch(document.querySelectorAll('#messages .attachment.image')[1].href).then(r => r.ok ? r.arrayBuffer() : null).then(b => b ? b.byteLength : -1)`, &second)
	if second <= 0 {
		bob.fail("the refreshed link of the pasted image: %d bytes", second)
	}

	// Carol, no member, gets 404 for the file, by token.
	req, _ := http.NewRequest("GET", srv.URL+"/api/v1/files/"+shown[0].ID, nil)
	req.Header.Set("Authorization", "Bearer "+carol.token())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("a non-member's request: %d, want 404", res.StatusCode)
	}
	var status int
	carol.evalAwait(fmt.Sprintf(`fetch('/api/v1/files/' + %s, {headers: {Authorization: 'Bearer ' + localStorage.getItem('imserver.token')}}).then(r => r.status)`, jsString(shown[1].ID)), &status)
	if status != http.StatusNotFound {
		carol.fail("a non-member's request in the browser: %d, want 404", status)
	}
}

// evalAwait is eval for an expression whose value is a promise.
func (b *tab) evalAwait(expr string, out any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail("evaluating %s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.fail("decoding %s from %s: %v", raw, expr, err)
		}
	}
}
