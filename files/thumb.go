package files

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/image/draw"
)

// ThumbSize bounds both sides of a thumbnail.
const ThumbSize = 400

// thumbExts name the thumbnails beside a blob: JPEG for photos, PNG for
// the rest (transparency).
var thumbExts = []string{".thumb.jpg", ".thumb.png"}

// ErrTooManyPixels refuses an image whose header announces more pixels
// than may be decoded: a "decompression bomb" of a few KB can claim
// 20000×20000 (1.6 GB decoded).
var ErrTooManyPixels = errors.New("image has too many pixels to preview")

// ErrNoPreview: the bytes are not an image that can be previewed.
var ErrNoPreview = errors.New("file has no preview")

// Thumbnailer makes thumbnails, a few at a time so that decoded images
// (12 megapixels are 18 MB) bound the heap, and keeps them on disk.
type Thumbnailer struct {
	store     *Store
	sem       chan struct{}
	maxPixels int64
}

// NewThumbnailer makes at most workers thumbnails at a time from images of
// at most maxPixels pixels.
func NewThumbnailer(s *Store, workers int, maxPixels int64) *Thumbnailer {
	return &Thumbnailer{store: s, sem: make(chan struct{}, max(1, workers)), maxPixels: maxPixels}
}

// MaxPixels is the largest image it decodes.
func (t *Thumbnailer) MaxPixels() int64 { return t.maxPixels }

// Fits reports whether an image of w×h may be decoded.
func (t *Thumbnailer) Fits(w, h int) bool {
	return w > 0 && h > 0 && int64(w)*int64(h) <= t.maxPixels
}

// Thumb returns the path and type of the thumbnail of the bytes of sha,
// making it on the first call.
func (t *Thumbnailer) Thumb(ctx context.Context, sha string) (path, ctype string, err error) {
	if !ValidHash(sha) {
		return "", "", os.ErrNotExist
	}
	base := t.store.Path(sha)
	if p, ct, ok := existingThumb(base); ok {
		return p, ct, nil
	}
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
	defer func() { <-t.sem }()
	if p, ct, ok := existingThumb(base); ok {
		return p, ct, nil // made while this one waited
	}
	f, err := os.Open(base)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	img, format, err := t.decode(f)
	if err != nil {
		return "", "", err
	}
	ext, ctype := ".thumb.png", "image/png"
	if format == "jpeg" {
		ext, ctype = ".thumb.jpg", "image/jpeg"
	}
	out := Scale(img, ThumbSize)
	if format == "jpeg" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", "", err
		}
		out = Oriented(out, jpegOrientation(f))
	}
	tmp, err := os.CreateTemp(filepath.Join(t.store.dir, "tmp"), "thumb-*")
	if err != nil {
		return "", "", err
	}
	defer os.Remove(tmp.Name())
	if ext == ".thumb.jpg" {
		err = jpeg.Encode(tmp, out, &jpeg.Options{Quality: 82})
	} else {
		err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(tmp, out)
	}
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp.Name(), base+ext); err != nil {
		return "", "", err
	}
	return base + ext, ctype, nil
}

func existingThumb(base string) (string, string, bool) {
	for _, ext := range thumbExts {
		if _, err := os.Stat(base + ext); err == nil {
			ct := "image/png"
			if ext == ".thumb.jpg" {
				ct = "image/jpeg"
			}
			return base + ext, ct, true
		}
	}
	return "", "", false
}

// decode decodes r after its header says it is small enough.
func (t *Thumbnailer) decode(r io.ReadSeeker) (image.Image, string, error) {
	cfg, format, err := image.DecodeConfig(r)
	if err != nil {
		return nil, "", ErrNoPreview
	}
	if !t.Fits(cfg.Width, cfg.Height) {
		return nil, "", fmt.Errorf("%w (%d×%d, the limit is %d pixels)", ErrTooManyPixels, cfg.Width, cfg.Height, t.maxPixels)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, "", err
	}
	img, format2, err := image.Decode(r)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrNoPreview, err)
	}
	if format2 != format {
		return nil, "", ErrNoPreview
	}
	return img, format, nil
}

// fit returns w×h scaled to fit a box of side n, never enlarged.
func fit(w, h, n int) (int, int) {
	if w <= n && h <= n {
		return w, h
	}
	if w >= h {
		return n, max(1, h*n/w)
	}
	return max(1, w*n/h), n
}

// Scale shrinks img to fit a box of side n. Photos (JPEG's YCbCr) are
// averaged over each output pixel's area, plane by plane, which is fast
// and does not alias; other images go through x/image/draw's CatmullRom.
func Scale(img image.Image, n int) image.Image {
	b := img.Bounds()
	tw, th := fit(b.Dx(), b.Dy(), n)
	if y, ok := img.(*image.YCbCr); ok {
		return scaleYCbCr(y, tw, th)
	}
	dst := image.NewNRGBA(image.Rect(0, 0, tw, th))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, b, draw.Src, nil)
	return dst
}

// boxPlane averages a w×h plane of bytes (rows stride apart) into tw×th.
func boxPlane(pix []byte, stride, w, h, tw, th int) []byte {
	sum := make([]uint32, tw*th)
	cnt := make([]uint32, tw*th)
	xmap := make([]int, w)
	for x := range xmap {
		xmap[x] = x * tw / w
	}
	for y := 0; y < h; y++ {
		ty := y * th / h
		row := pix[y*stride : y*stride+w]
		s := sum[ty*tw : ty*tw+tw]
		c := cnt[ty*tw : ty*tw+tw]
		for x, v := range row {
			tx := xmap[x]
			s[tx] += uint32(v)
			c[tx]++
		}
	}
	out := make([]byte, tw*th)
	for i := range out {
		if cnt[i] > 0 {
			out[i] = byte((sum[i] + cnt[i]/2) / cnt[i])
		}
	}
	return out
}

func scaleYCbCr(src *image.YCbCr, tw, th int) image.Image {
	b := src.Rect
	w, h := b.Dx(), b.Dy()
	yOff := src.YOffset(b.Min.X, b.Min.Y)
	ys := boxPlane(src.Y[yOff:], src.YStride, w, h, tw, th)
	// The chroma planes cover the same area with fewer samples.
	cOff := src.COffset(b.Min.X, b.Min.Y)
	cw, ch := w, h
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio422:
		cw = (w + 1) / 2
	case image.YCbCrSubsampleRatio420:
		cw, ch = (w+1)/2, (h+1)/2
	case image.YCbCrSubsampleRatio440:
		ch = (h + 1) / 2
	case image.YCbCrSubsampleRatio411:
		cw = (w + 3) / 4
	case image.YCbCrSubsampleRatio410:
		cw, ch = (w+3)/4, (h+1)/2
	}
	if cw < tw || ch < th {
		// Barely shrunk: too few chroma samples to average.
		dst := image.NewNRGBA(image.Rect(0, 0, tw, th))
		draw.CatmullRom.Scale(dst, dst.Bounds(), src, b, draw.Src, nil)
		return dst
	}
	cb := boxPlane(src.Cb[cOff:], src.CStride, cw, ch, tw, th)
	cr := boxPlane(src.Cr[cOff:], src.CStride, cw, ch, tw, th)
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	for i := range ys {
		r, g, bl := color.YCbCrToRGB(ys[i], cb[i], cr[i])
		p := dst.Pix[i*4 : i*4+4]
		p[0], p[1], p[2], p[3] = r, g, bl, 255
	}
	return dst
}
