package files

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"testing"
)

// withOrientation returns a JPEG of img carrying EXIF orientation o in
// an APP1 segment right after SOI, in byte order bo.
func withOrientation(t *testing.T, img image.Image, o int, bo binary.ByteOrder) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	tiff := make([]byte, 8+2+12+4)
	if bo == binary.LittleEndian {
		copy(tiff, "II")
	} else {
		copy(tiff, "MM")
	}
	bo.PutUint16(tiff[2:], 42)
	bo.PutUint32(tiff[4:], 8)
	bo.PutUint16(tiff[8:], 1)       // one entry
	bo.PutUint16(tiff[10:], 0x0112) // Orientation
	bo.PutUint16(tiff[12:], 3)      // SHORT
	bo.PutUint32(tiff[14:], 1)
	bo.PutUint16(tiff[18:], uint16(o))
	seg := append([]byte("Exif\x00\x00"), tiff...)
	app1 := []byte{0xFF, 0xE1, 0, 0}
	binary.BigEndian.PutUint16(app1[2:], uint16(len(seg)+2))
	b := buf.Bytes()
	out := append([]byte{}, b[:2]...)
	out = append(out, app1...)
	out = append(out, seg...)
	return append(out, b[2:]...)
}

// TestJPEGOrientation: the tag is read in either byte order, after other
// segments; a JPEG without one, or not a JPEG, is as stored.
func TestJPEGOrientation(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 16, 8))
	for o := 1; o <= 8; o++ {
		for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			if got := jpegOrientation(bytes.NewReader(withOrientation(t, img, o, bo))); got != o {
				t.Errorf("orientation %d (%v): read %d", o, bo, got)
			}
		}
	}
	var plain bytes.Buffer
	if err := jpeg.Encode(&plain, img, nil); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"no EXIF": plain.Bytes(), "not a JPEG": []byte("GIF89a...."), "empty": nil,
		"truncated": withOrientation(t, img, 6, binary.BigEndian)[:20]} {
		if got := jpegOrientation(bytes.NewReader(b)); got != 1 {
			t.Errorf("%s: orientation %d, want 1", name, got)
		}
	}
}

// TestOriented turns a 3×2 image of distinct pixels each way EXIF names
// and checks where its top-left pixel (as displayed) comes from.
func TestOriented(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	px := func(x, y int) color.NRGBA { return color.NRGBA{uint8(10 * x), uint8(10 * y), 0, 255} }
	for y := range 2 {
		for x := range 3 {
			src.Set(x, y, px(x, y))
		}
	}
	// For each orientation: the displayed size and the stored pixel at
	// the displayed top-left and top-right corners.
	for o, want := range map[int]struct {
		w, h              int
		topLeft, topRight color.NRGBA
	}{
		1: {3, 2, px(0, 0), px(2, 0)},
		2: {3, 2, px(2, 0), px(0, 0)},
		3: {3, 2, px(2, 1), px(0, 1)},
		4: {3, 2, px(0, 1), px(2, 1)},
		5: {2, 3, px(0, 0), px(0, 1)},
		6: {2, 3, px(0, 1), px(0, 0)},
		7: {2, 3, px(2, 1), px(2, 0)},
		8: {2, 3, px(2, 0), px(2, 1)},
	} {
		got := Oriented(src, o)
		b := got.Bounds()
		if b.Dx() != want.w || b.Dy() != want.h {
			t.Errorf("orientation %d: %d×%d, want %d×%d", o, b.Dx(), b.Dy(), want.w, want.h)
			continue
		}
		tl := color.NRGBAModel.Convert(got.At(b.Min.X, b.Min.Y)).(color.NRGBA)
		tr := color.NRGBAModel.Convert(got.At(b.Max.X-1, b.Min.Y)).(color.NRGBA)
		if tl != want.topLeft || tr != want.topRight {
			t.Errorf("orientation %d: top corners %v %v, want %v %v", o, tl, tr, want.topLeft, want.topRight)
		}
	}
}

// TestOrientedPhoto: a JPEG stored landscape (red left half, blue right
// half) with orientation 6 is uploaded with its displayed size, portrait,
// and its thumbnail is portrait too, red on top, as a browser shows the
// photo.
func TestOrientedPhoto(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 120, 30))
	for y := range 30 {
		for x := range 120 {
			c := color.RGBA{220, 0, 0, 255}
			if x >= 60 {
				c = color.RGBA{0, 0, 220, 255}
			}
			src.Set(x, y, c)
		}
	}
	s, err := Open(t.TempDir(), 0, func(context.Context, string) (int, error) { return 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Write(bytes.NewReader(withOrientation(t, src, 6, binary.LittleEndian)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if u.Width != 30 || u.Height != 120 || u.Format != "jpeg" {
		t.Fatalf("upload: %d×%d %s, want 30×120 jpeg", u.Width, u.Height, u.Format)
	}
	if err := s.Keep(context.Background(), u, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	path, _, err := NewThumbnailer(s, 1, 1<<24).Thumb(context.Background(), u.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	thumb, _, err := image.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := thumb.Bounds()
	if b.Dx() != 30 || b.Dy() != 120 {
		t.Fatalf("thumbnail %d×%d, want 30×120", b.Dx(), b.Dy())
	}
	top, bottom := thumb.At(15, 10), thumb.At(15, 110)
	if r, _, bl, _ := top.RGBA(); r < 0x8000 || bl > 0x4000 {
		t.Errorf("top of the thumbnail %v, want red", top)
	}
	if r, _, bl, _ := bottom.RGBA(); bl < 0x8000 || r > 0x4000 {
		t.Errorf("bottom of the thumbnail %v, want blue", bottom)
	}
}
