package files

import (
	"bufio"
	"encoding/binary"
	"image"
	"io"
)

// Phones store a photo as the sensor saw it and say in its EXIF
// Orientation tag (1-8) how to turn it for display; every browser does.
// Go's image/jpeg ignores EXIF, so a portrait photo's size would read as
// landscape and its thumbnail would lie on its side. jpegOrientation
// reads the tag; Oriented turns an image by it.

// exifMaxSegment bounds the APP1 segment read for the tag.
const exifMaxSegment = 64 << 10

// jpegOrientation returns the EXIF orientation of the JPEG r, 1 (as
// stored) when it has none or it cannot be read.
func jpegOrientation(r io.Reader) int {
	br := bufio.NewReader(r)
	var soi [2]byte
	if _, err := io.ReadFull(br, soi[:]); err != nil || soi != [2]byte{0xFF, 0xD8} {
		return 1
	}
	// The markers before the image data: APP1 (Exif) comes first or
	// after APP0 (JFIF), but any order is read, up to the first scan.
	for range 32 {
		var m [4]byte
		if _, err := io.ReadFull(br, m[:]); err != nil || m[0] != 0xFF {
			return 1
		}
		marker, n := m[1], int(binary.BigEndian.Uint16(m[2:]))-2
		if marker == 0xDA || marker == 0xD9 || n < 0 {
			return 1 // start of scan, end of image: no tag
		}
		if marker != 0xE1 || n > exifMaxSegment {
			if _, err := br.Discard(n); err != nil {
				return 1
			}
			continue
		}
		seg := make([]byte, n)
		if _, err := io.ReadFull(br, seg); err != nil {
			return 1
		}
		if o, ok := exifOrientation(seg); ok {
			return o
		}
	}
	return 1
}

// exifOrientation reads the Orientation tag (0x0112) of IFD0 in an APP1
// segment's payload ("Exif\0\0" and a TIFF header).
func exifOrientation(seg []byte) (int, bool) {
	if len(seg) < 14 || string(seg[:6]) != "Exif\x00\x00" {
		return 0, false
	}
	tiff := seg[6:]
	var bo binary.ByteOrder
	switch string(tiff[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 0, false
	}
	if bo.Uint16(tiff[2:]) != 42 {
		return 0, false
	}
	ifd := int(bo.Uint32(tiff[4:]))
	if ifd < 8 || ifd+2 > len(tiff) {
		return 0, false
	}
	count := int(bo.Uint16(tiff[ifd:]))
	for i := range count {
		e := ifd + 2 + 12*i
		if e+12 > len(tiff) {
			return 0, false
		}
		if bo.Uint16(tiff[e:]) != 0x0112 {
			continue
		}
		// A SHORT, in the first two bytes of the value field.
		if bo.Uint16(tiff[e+2:]) != 3 {
			return 0, false
		}
		o := int(bo.Uint16(tiff[e+8:]))
		if o < 1 || o > 8 {
			return 0, false
		}
		return o, true
	}
	return 0, false
}

// Swapped reports whether orientation o turns the image a quarter:
// its displayed width is its stored height.
func Swapped(o int) bool { return o >= 5 && o <= 8 }

// Oriented returns img turned as EXIF orientation o asks (1: img).
func Oriented(img image.Image, o int) image.Image {
	if o <= 1 || o > 8 {
		return img
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	dw, dh := w, h
	if Swapped(o) {
		dw, dh = h, w
	}
	dst := image.NewNRGBA(image.Rect(0, 0, dw, dh))
	for y := range dh {
		for x := range dw {
			var sx, sy int
			switch o {
			case 2: // mirrored
				sx, sy = w-1-x, y
			case 3: // upside down
				sx, sy = w-1-x, h-1-y
			case 4: // mirrored upside down
				sx, sy = x, h-1-y
			case 5: // mirrored, turned a quarter left
				sx, sy = y, x
			case 6: // turned a quarter right for display
				sx, sy = y, h-1-x
			case 7: // mirrored, turned a quarter right
				sx, sy = w-1-y, h-1-x
			case 8: // turned a quarter left for display
				sx, sy = w-1-y, x
			}
			dst.Set(x, y, img.At(b.Min.X+sx, b.Min.Y+sy))
		}
	}
	return dst
}
