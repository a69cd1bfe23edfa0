package server

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// openAPIDoc is the part of an OpenAPI 3.1 document the checks read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title   string `json:"title"`
		Version string `json:"version"`
	} `json:"info"`
	Paths map[string]map[string]struct {
		OperationID string                     `json:"operationId"`
		Responses   map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas   map[string]json.RawMessage `json:"schemas"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
}

var httpMethods = map[string]bool{"get": true, "put": true, "post": true, "delete": true, "options": true, "head": true, "patch": true, "trace": true}

// TestOpenAPIDocumentsEveryRoute: every route the mux registers is in
// server/openapi.json and the document has no path the server does not
// serve. A helper adding a route adds it to the document too.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("server/openapi.json is not JSON: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if httpMethods[method] {
				documented[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	served := map[string]bool{}
	s := &Server{metrics: NewMetrics()}
	for _, r := range s.apiRoutes() {
		// Go's {name...} wildcard is OpenAPI's {name}.
		served[r.method+" "+strings.ReplaceAll(r.pattern, "...}", "}")] = true
	}
	var missing, extra []string
	for k := range served {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !served[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, k := range missing {
		method, path, _ := strings.Cut(k, " ")
		t.Errorf("route %s is served but not documented: add paths[%q].%s (operationId, summary, responses; schemas under components) to server/openapi.json", k, path, strings.ToLower(method))
	}
	for _, k := range extra {
		t.Errorf("server/openapi.json documents %s, which the server does not serve (server/routes.go apiRoutes): remove it or register the route", k)
	}
}

// TestOpenAPIShape: the document is OpenAPI 3.1 shaped: version 3.1.x,
// info, every operation with an operationId (unique) and responses, every
// $ref resolving inside the document.
func TestOpenAPIShape(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(doc.OpenAPI) {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	if doc.Info.Title == "" || doc.Info.Version == "" {
		t.Fatal("info.title and info.version are required")
	}
	ids := map[string]string{}
	for path, ops := range doc.Paths {
		if !strings.HasPrefix(path, "/") {
			t.Errorf("path %q must start with /", path)
		}
		for method, op := range ops {
			if !httpMethods[method] {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			if len(op.Responses) == 0 {
				t.Errorf("%s has no responses", where)
			}
			for code := range op.Responses {
				if !regexp.MustCompile(`^([1-5]\d\d|[1-5]XX|default)$`).MatchString(code) {
					t.Errorf("%s: response key %q is not a status code", where, code)
				}
			}
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", where)
			} else if other, dup := ids[op.OperationID]; dup {
				t.Errorf("%s and %s share operationId %q", where, other, op.OperationID)
			}
			ids[op.OperationID] = where
		}
	}
	for _, m := range regexp.MustCompile(`"\$ref":\s*"([^"]*)"`).FindAllSubmatch(openAPI, -1) {
		ref := string(m[1])
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		if ok && doc.Components.Schemas[name] != nil {
			continue
		}
		name, ok = strings.CutPrefix(ref, "#/components/responses/")
		if ok && doc.Components.Responses[name] != nil {
			continue
		}
		t.Errorf("$ref %q does not resolve in the document", ref)
	}
}
