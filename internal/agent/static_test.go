package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
)

// staticAgent serves a fresh folder holding index.html, app.js, a docs/
// folder with a page, a dotfile, .well-known/security.txt, an empty
// folder and a symbolic link to a file outside the folder; configure
// adjusts the service.
func staticAgent(t *testing.T, configure func(*config.Service)) *Agent {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "public")
	for name, body := range map[string]string{
		"index.html":               "<h1>home</h1>",
		"app.js":                   strings.Repeat("x", 1000),
		"docs/guide.html":          "guide",
		".env":                     "SECRET=1",
		".well-known/security.txt": "contact: ops",
		"empty/.keep":              "",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "outside.txt"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside.txt"), filepath.Join(root, "escape.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside.txt", filepath.Join(root, "docs", "up.txt")); err != nil {
		t.Fatal(err)
	}
	cfg := clientConfig("")
	cfg.Services[0].Serve = root
	if configure != nil {
		configure(&cfg.Services[0])
	}
	return newAgent(t, cfg)
}

// get sends one request through the agent's forward path and returns the
// response with its body read.
func staticGet(t *testing.T, a *Agent, method, target string, header http.Header) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := a.Forward(t.Context(), "0", req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, target, err)
	}
	return resp, string(b)
}

func TestStaticFiles(t *testing.T) {
	a := staticAgent(t, nil)
	resp, body := staticGet(t, a, "GET", "/", nil)
	if resp.StatusCode != 200 || body != "<h1>home</h1>" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %q %q, want the index", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no X-Content-Type-Options: nosniff")
	}

	resp, body = staticGet(t, a, "GET", "/app.js", nil)
	etag, lm := resp.Header.Get("Etag"), resp.Header.Get("Last-Modified")
	if resp.StatusCode != 200 || len(body) != 1000 || !strings.HasPrefix(etag, `W/"`) || lm == "" || resp.ContentLength != 1000 {
		t.Fatalf("GET /app.js = %d, %d bytes, etag %q, last-modified %q, length %d", resp.StatusCode, len(body), etag, lm, resp.ContentLength)
	}
	resp, body = staticGet(t, a, "GET", "/app.js", http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("GET /app.js If-None-Match = %d %q, want 304", resp.StatusCode, body)
	}
	resp, _ = staticGet(t, a, "GET", "/app.js", http.Header{"If-Modified-Since": {lm}})
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("GET /app.js If-Modified-Since = %d, want 304", resp.StatusCode)
	}
	resp, body = staticGet(t, a, "GET", "/app.js", http.Header{"Range": {"bytes=10-19"}})
	if resp.StatusCode != http.StatusPartialContent || body != strings.Repeat("x", 10) || resp.Header.Get("Content-Range") != "bytes 10-19/1000" {
		t.Fatalf("GET /app.js Range = %d %q %q, want 206 of 10 bytes", resp.StatusCode, body, resp.Header.Get("Content-Range"))
	}
	resp, body = staticGet(t, a, "HEAD", "/app.js", nil)
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 1000 {
		t.Fatalf("HEAD /app.js = %d %q length %d, want 200, no body, length 1000", resp.StatusCode, body, resp.ContentLength)
	}

	resp, _ = staticGet(t, a, "GET", "/docs?x=1", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "./docs/?x=1" {
		t.Fatalf("GET /docs = %d %q, want 301 to ./docs/?x=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body = staticGet(t, a, "GET", "/docs/guide.html", nil)
	if resp.StatusCode != 200 || body != "guide" {
		t.Fatalf("GET /docs/guide.html = %d %q", resp.StatusCode, body)
	}
	resp, body = staticGet(t, a, "GET", "/.well-known/security.txt", nil)
	if resp.StatusCode != 200 || body != "contact: ops" {
		t.Fatalf("GET /.well-known/security.txt = %d %q, want it served", resp.StatusCode, body)
	}

	// Never outside the folder, never a hidden file, no listing by default.
	for _, p := range []string{"/.env", "/escape.txt", "/docs/up.txt", "/empty/", "/docs/", "/missing", "/a%5c..%5cb", "/%2e%2e/outside.txt", "/docs/%2e%2e/%2e%2e/outside.txt"} {
		resp, body := staticGet(t, a, "GET", p, nil)
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s = %d %q, want 404 or 400", p, resp.StatusCode, body)
		}
		if strings.Contains(body, "outside") || strings.Contains(body, "SECRET") {
			t.Errorf("GET %s leaked %q", p, body)
		}
	}
	resp, _ = staticGet(t, a, "POST", "/", nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST / = %d Allow %q, want 405 GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestStaticSPAAndListing(t *testing.T) {
	a := staticAgent(t, func(s *config.Service) { s.SPA = true; s.DirectoryListing = true })
	resp, body := staticGet(t, a, "GET", "/dashboard/settings", nil)
	if resp.StatusCode != 200 || body != "<h1>home</h1>" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("GET /dashboard/settings = %d %q, want the index (SPA fallback), no-cache", resp.StatusCode, body)
	}
	resp, _ = staticGet(t, a, "GET", "/missing.js", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /missing.js = %d, want 404: a missing asset is no route", resp.StatusCode)
	}
	resp, _ = staticGet(t, a, "GET", "/.env", nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /.env with spa = %d, want 404", resp.StatusCode)
	}
	resp, body = staticGet(t, a, "GET", "/docs/", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `href="./guide.html"`) || strings.Contains(body, ".env") {
		t.Fatalf("GET /docs/ listing = %d %q", resp.StatusCode, body)
	}
	resp, body = staticGet(t, a, "GET", "/empty/", nil)
	if resp.StatusCode != 200 || strings.Contains(body, ".keep") {
		t.Fatalf("GET /empty/ listing = %d %q, want a listing without hidden names", resp.StatusCode, body)
	}
}

// TestStaticIndexOption: index names another file; a folder removed
// under a running client answers 503, not a panic.
func TestStaticIndexOption(t *testing.T) {
	var dir string
	a := staticAgent(t, func(s *config.Service) { s.Index = "guide.html"; dir = s.Serve })
	resp, body := staticGet(t, a, "GET", "/docs/", nil)
	if resp.StatusCode != 200 || body != "guide" {
		t.Fatalf("GET /docs/ with index guide.html = %d %q", resp.StatusCode, body)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	resp, _ = staticGet(t, a, "GET", "/", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET / after the folder went = %d, want 503", resp.StatusCode)
	}
}

// TestStaticVisitorLeaves: a visitor who closes the body early ends the
// handler (the pipe's writes fail); nothing blocks.
func TestStaticVisitorLeaves(t *testing.T) {
	var dir string
	a := staticAgent(t, func(s *config.Service) { dir = s.Serve })
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, err := a.Forward(t.Context(), "0", httptest.NewRequest("GET", "/big.bin", nil))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := a.services()[0].inflight.Load(); n != 0 {
		t.Fatalf("inflight after the body closed = %d, want 0", n)
	}
}

// TestStaticPathRule: a serve: folder reads a path as the server matched
// it (#38 item 2): empty segments collapse, ";" parameters are ignored,
// and a dot segment behind a parameter is refused.
func TestStaticPathRule(t *testing.T) {
	a := staticAgent(t, nil)
	for _, tc := range []struct {
		target string
		status int
		body   string
	}{
		{"//docs//guide.html", 200, "guide"},
		{"/docs/guide.html;jsessionid=AB12", 200, "guide"},
		{"/docs;v=1/guide.html", 200, "guide"},
		{"/;x/docs/guide.html", 200, "guide"},
		{"/docs/..;/.env", 400, ""},
		{"/docs/.;x/guide.html", 400, ""},
		{"/docs/%2e%2e%3b/.env", 400, ""},
		{"/.env;x", 404, ""},
	} {
		resp, body := staticGet(t, a, "GET", tc.target, nil)
		if resp.StatusCode != tc.status || tc.body != "" && body != tc.body {
			t.Errorf("GET %s = %d %q, want %d %q", tc.target, resp.StatusCode, body, tc.status, tc.body)
		}
		if strings.Contains(body, "SECRET") {
			t.Errorf("GET %s leaked %q", tc.target, body)
		}
	}
	resp, _ := staticGet(t, a, "GET", "/docs;v=1?x=1", nil)
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "./docs/?x=1" {
		t.Errorf("GET /docs;v=1 = %d %q, want 301 to ./docs/?x=1", resp.StatusCode, resp.Header.Get("Location"))
	}
}
