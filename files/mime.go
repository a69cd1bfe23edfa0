package files

import (
	"mime"
	"strings"
)

// inlineTypes are the raster image types a browser may show inline: they
// cannot run script. SVG is an image that can, so it is not here.
var inlineTypes = map[string]bool{
	"image/png":  true,
	"image/jpeg": true,
	"image/gif":  true,
	"image/webp": true,
}

// maxDeclaredType bounds a declared Content-Type worth reading (RFC 6838
// allows 127 characters each for the type and the subtype).
const maxDeclaredType = 255

// DetectType decides a file's type from what the client declared and what
// http.DetectContentType sniffed from its first bytes. The sniffed type
// wins whenever it is one of the raster image types or the declared type
// claims one that the bytes are not (an HTML page sent as image/png is
// recorded as text/html); otherwise the declared type is kept when it is
// well formed, since sniffing cannot name most document types.
func DetectType(declared, sniffed string) string {
	sniffed = baseType(sniffed)
	if len(declared) > maxDeclaredType {
		// Stored and sent with every message that attaches the file: a
		// client may not make each of those megabytes long.
		declared = ""
	}
	d, _, err := mime.ParseMediaType(declared)
	if inlineTypes[sniffed] {
		return sniffed
	}
	if err != nil || d == "" || inlineTypes[d] || d == "image/svg+xml" && sniffed != "text/xml" && sniffed != "text/plain" {
		return sniffed
	}
	if strings.HasPrefix(d, "multipart/") {
		return sniffed
	}
	return d
}

// Inline reports whether a file of type mime, whose bytes sniff as
// sniffed, may be shown in the browser rather than downloaded.
func Inline(mime, sniffed string) bool {
	return inlineTypes[mime] && baseType(sniffed) == mime
}

// Previewable reports whether a thumbnail can be made for the type.
func Previewable(mime string) bool { return inlineTypes[mime] }

func baseType(t string) string {
	if i := strings.IndexByte(t, ';'); i >= 0 {
		t = t[:i]
	}
	return strings.ToLower(strings.TrimSpace(t))
}
