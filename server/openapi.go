package server

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of the HTTP API, served as it is
// kept in the repository so client authors can generate clients; a test
// checks it against the registered routes.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPI)
}
