package files

import (
	"image"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
)

func TestDetectType(t *testing.T) {
	for _, c := range []struct{ declared, sniffed, want string }{
		{"image/png", "image/png", "image/png"},
		{"image/png", "text/html; charset=utf-8", "text/html"},   // a lie
		{"application/octet-stream", "image/jpeg", "image/jpeg"}, // undeclared image
		{"application/pdf", "application/pdf", "application/pdf"},
		{"application/vnd.openxmlformats-officedocument.wordprocessingml.document", "application/zip", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
		{"", "text/plain; charset=utf-8", "text/plain"},
		{"not a type", "application/octet-stream", "application/octet-stream"},
		{"image/svg+xml", "text/html; charset=utf-8", "text/html"},
		{"image/svg+xml", "text/xml; charset=utf-8", "image/svg+xml"},
	} {
		if got := DetectType(c.declared, c.sniffed); got != c.want {
			t.Errorf("DetectType(%q, %q) = %q, want %q", c.declared, c.sniffed, got, c.want)
		}
	}
	if Inline("image/svg+xml", "text/xml") || Inline("image/png", "text/html") || !Inline("image/webp", "image/webp") {
		t.Error("Inline allows a type it must not, or refuses WebP")
	}
}

// TestSignedLinks: a link is valid for its file and kind until it
// expires, at least LinkTTL after it was made.
func TestSignedLinks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := NewSigner([]byte("key"), "/api/v1/files/", 1000)
	s.now = func() time.Time { return now }
	f := chat.File{ID: "f1", Mime: "image/png", Width: 10, Height: 10}
	s.Link(&f)
	if f.ThumbURL == "" {
		t.Fatal("no thumbnail link for a small PNG")
	}
	q := func(link string) url.Values {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query()
	}
	full, thumb := q(f.URL), q(f.ThumbURL)
	if !s.Verify("f1", false, full.Get("exp"), full.Get("sig")) || !s.Verify("f1", true, thumb.Get("exp"), thumb.Get("sig")) {
		t.Fatal("fresh links do not verify")
	}
	if s.Verify("f2", false, full.Get("exp"), full.Get("sig")) || s.Verify("f1", true, full.Get("exp"), full.Get("sig")) {
		t.Fatal("a link opens another file or the other kind")
	}
	now = now.Add(LinkTTL - time.Second)
	if !s.Verify("f1", false, full.Get("exp"), full.Get("sig")) {
		t.Fatal("a link expired before LinkTTL")
	}
	now = now.Add(LinkTTL + 2*time.Second)
	if s.Verify("f1", false, full.Get("exp"), full.Get("sig")) {
		t.Fatal("a link outlived two LinkTTLs")
	}
	big := chat.File{ID: "f3", Mime: "image/png", Width: 100, Height: 100}
	s.Link(&big)
	if big.ThumbURL != "" || !strings.Contains(big.URL, "sig=") {
		t.Fatalf("an image over the pixel limit: %+v", big)
	}
}

func TestScaleFits(t *testing.T) {
	for _, c := range []struct{ w, h, tw, th int }{{4000, 3000, 400, 300}, {3000, 4000, 300, 400}, {300, 200, 300, 200}, {5000, 10, 400, 1}} {
		img := image.NewYCbCr(image.Rect(0, 0, c.w, c.h), image.YCbCrSubsampleRatio420)
		if b := Scale(img, ThumbSize).Bounds(); b.Dx() != c.tw || b.Dy() != c.th {
			t.Errorf("%d×%d scaled to %v, want %d×%d", c.w, c.h, b, c.tw, c.th)
		}
	}
}
