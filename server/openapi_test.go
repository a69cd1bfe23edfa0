package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestOpenAPIServed: the document is served without a token, as JSON.
func TestOpenAPIServed(t *testing.T) {
	ts := newServer(t)
	r := ts.do(t, "GET", "/api/v1/openapi.json", "", nil).want(t, http.StatusOK)
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	r.decode(t, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") || doc.Paths["/api/v1/conversations/{id}/messages"] == nil {
		t.Fatalf("openapi %q with %d paths", doc.OpenAPI, len(doc.Paths))
	}
	if !json.Valid(r.Body) {
		t.Fatal("not JSON")
	}
}
