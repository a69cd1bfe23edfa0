package web

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, p string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
	return rec.Result()
}

func TestServesIndex(t *testing.T) {
	res := get(t, "/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d", res.StatusCode)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `<script type="module" src="/app.js">`) {
		t.Errorf("index.html does not load app.js:\n%s", body)
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "connect-src 'self'", "script-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
}

func TestContentTypes(t *testing.T) {
	for p, want := range map[string]string{
		"/app.js":      "text/javascript",
		"/style.css":   "text/css",
		"/favicon.svg": "image/svg+xml",
	} {
		res := get(t, p)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", p, res.StatusCode)
			continue
		}
		if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, want) {
			t.Errorf("GET %s: Content-Type %q, want %s", p, got, want)
		}
	}
}

func staticFiles(t *testing.T) map[string]string {
	t.Helper()
	sub, err := fs.Sub(files, "static")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every relative import names an embedded file: a typo would only show as
// a blank page in the browser.
func TestModuleImportsResolve(t *testing.T) {
	all := staticFiles(t)
	imp := regexp.MustCompile(`(?m)^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]`)
	for name, src := range all {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		for _, m := range imp.FindAllStringSubmatch(src, -1) {
			spec := m[1]
			if !strings.HasPrefix(spec, "./") {
				t.Errorf("%s imports %q: only relative imports of our own files are allowed", name, spec)
				continue
			}
			if _, ok := all[path.Join(path.Dir(name), spec)]; !ok {
				t.Errorf("%s imports %q, which is not embedded", name, spec)
			}
		}
	}
}

// The UI loads nothing from elsewhere: no CDN scripts, styles or fonts.
func TestNoExternalResources(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import|from\s+["']https?:|import\(\s*["']https?:`)
	for name, src := range staticFiles(t) {
		if m := external.FindString(src); m != "" {
			t.Errorf("%s refers to an outside resource: %q", name, m)
		}
	}
}
