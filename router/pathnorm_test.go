package router

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/urlpath"
)

var normalizePathCases = []struct {
	target  string // request target as sent
	uri     string // RequestURI after normalizing; "" when refused
	matchOn string // the path binds are matched against
}{
	{"/", "/", "/"},
	{"/api/x?q=1", "/api/x?q=1", "/api/x"},
	{"/api/../admin", "/admin", "/admin"},
	{"/api/%2e%2e/admin", "/admin", "/admin"},
	{"/api/%2E./admin", "/admin", "/admin"},
	{"/api/.%2e/admin", "/admin", "/admin"},
	{"/x/../api/secret", "/api/secret", "/api/secret"},
	{"/api/./x", "/api/x", "/api/x"},
	{"/api/x/.", "/api/x/", "/api/x/"},
	{"/api/x/..", "/api/", "/api/"},
	{"/%61pi/x", "/api/x", "/api/x"},
	{"/api/a%2fb", "/api/a%2Fb", "/api/a%2Fb"},
	{"/api/%20x?a=/../", "/api/%20x?a=/../", "/api/ x"},
	{"/api//x", "/api/x", "/api/x"},
	{"//admin", "/admin", "/admin"},
	{"///admin/x", "/admin/x", "/admin/x"},
	{"/admin//", "/admin/", "/admin/"},
	{"/admin;x", "/admin;x", "/admin"},
	{"/admin;/x", "/admin;/x", "/admin/x"},
	{"/app/page;jsessionid=AB12?q=1", "/app/page;jsessionid=AB12?q=1", "/app/page"},
	{"/;x/admin", "/;x/admin", "/admin"},
	{"/a;x/../admin", "/admin", "/admin"},
	{"/admin%3Bx", "/admin%3Bx", "/admin;x"},
	{"/a/..;/admin", "", ""},
	{"/a/.;x/admin", "", ""},
	{"/a/%2e%2e;/admin", "", ""},
	{"/a/..%3b/admin", "", ""},
	{"/a/x%2F..;/admin", "", ""},
	{"/;x/../admin", "", ""},
	{"/a%2Fb/../admin", "", ""},
	{"/.well-known/x", "/.well-known/x", "/.well-known/x"},
	{"/a/...", "/a/...", "/a/..."},
	{"/..", "", ""},
	{"/../x", "", ""},
	{"/a/../../x", "", ""},
	{"/%2e%2e/x", "", ""},
	{"/api%2F..%2Fadmin", "", ""},
	{"/api/..%2fadmin", "", ""},
	{"/api/..%5cadmin", "", ""},
}

func TestNormalizePath(t *testing.T) {
	for _, tc := range normalizePathCases {
		t.Run(tc.target, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			key, _, err := normalizePath(r)
			if tc.uri == "" {
				if !errors.Is(err, urlpath.ErrBadPath) {
					t.Errorf("normalizePath(%q) = %q, %v; want errBadPath", tc.target, key, err)
				}
				return
			}
			if err != nil || key != tc.matchOn || r.RequestURI != tc.uri {
				t.Errorf("normalizePath(%q) = %q, %v, RequestURI %q; want %q, nil, %q", tc.target, key, err, r.RequestURI, tc.matchOn, tc.uri)
			}
			if got := r.URL.RequestURI(); got != tc.uri {
				t.Errorf("normalizePath(%q): URL.RequestURI() = %q, want %q", tc.target, got, tc.uri)
			}
		})
	}
}

func TestNormalizedPathsMatchInsideBind(t *testing.T) {
	rt := newRouter(t, Config{})
	api, root := newConn("api", 0), newConn("root", 1)
	rt.reg.update(api, ann(svc("/api", "app.test")))
	rt.reg.update(root, ann(svc("", "app.test")))
	for _, c := range []struct{ target, want string }{
		{"/api/../admin", "root/0"},
		{"/api/%2e%2e/admin", "root/0"},
		{"/x/../api/secret", "api/0"},
		{"/api%2Fx", "root/0"},
	} {
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://app.test"+c.target, nil))
		if w.Code != http.StatusOK || w.Body.String() != c.want {
			t.Errorf("GET %s = %d %q, want 200 %q", c.target, w.Code, w.Body.String(), c.want)
		}
	}
}

// FuzzNormalizePath checks the invariants of the normal form: it never
// holds a dot segment (plain, encoded, with a parameter or behind an
// encoded separator) or an empty segment but a trailing one, never
// climbs, is stable, keeps the query, and its key holds no parameter.
func FuzzNormalizePath(f *testing.F) {
	for _, tc := range normalizePathCases {
		f.Add(tc.target)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") {
			return
		}
		r, err := http.NewRequest(http.MethodGet, "http://h"+target, nil)
		if err != nil {
			return
		}
		r.RequestURI = target
		query := r.URL.RawQuery
		key, _, err := normalizePath(r)
		if err != nil {
			return
		}
		esc := r.URL.EscapedPath()
		segs := strings.Split(esc, "/")
		for i, seg := range segs[1:] {
			if urlpath.DotSegment(seg) || seg == "" && i != len(segs)-2 {
				t.Fatalf("normalizePath(%q) left a dot or empty segment in %q", target, esc)
			}
		}
		if strings.Contains(key, "//") {
			t.Fatalf("normalizePath(%q): key %q holds an empty segment", target, key)
		}
		if r.URL.RawQuery != query {
			t.Fatalf("normalizePath(%q) changed the query %q to %q", target, query, r.URL.RawQuery)
		}
		again := r.Clone(r.Context())
		if _, _, err := normalizePath(again); err != nil || again.URL.EscapedPath() != esc {
			t.Fatalf("normalizePath not stable on %q: %q, %v", esc, again.URL.EscapedPath(), err)
		}
	})
}

// TestNormalPathAllocatesNothing: the path stage costs an already-normal
// path one scan and no allocation.
func TestNormalPathAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://app.test/api/v1/users/123?x=1", nil)
	if n := testing.AllocsPerRun(1000, func() {
		if key, other, err := normalizePath(r); err != nil || key != "/api/v1/users/123" || other != nil {
			t.Fatalf("normalizePath = %q, %q, %v", key, other, err)
		}
	}); n != 0 {
		t.Errorf("normalizePath of a normal path allocates %v times, want 0", n)
	}
}
