// Package web is the browser UI: plain ES modules and CSS, embedded in the
// binary so that a single file runs the whole product.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Handler serves the UI. The server mounts it at "/".
func Handler() http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		// The embed pattern above guarantees the folder; this cannot fail.
		panic(err)
	}
	return headers(http.FileServer(http.FS(static)))
}

// headers adds a strict content security policy: the UI loads nothing from
// other origins and talks only to its own server (HTTP and WebSocket). The
// files change with the binary, so browsers revalidate instead of caching a
// stale mix of modules across an upgrade.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
