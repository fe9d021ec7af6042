package stale_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
)

const page = "http://app.example.com/page"

func TestRecordStorable(t *testing.T) {
	tests := []struct {
		name string
		req  *http.Request
		resp *http.Response
		want bool
	}{
		{"200", request("GET", page), response(200, "hello"), true},
		{"203", request("GET", page), response(203, "hello"), true},
		{"301", request("GET", page), response(301, "hello", "Location", "/new"), true},
		{"404", request("GET", page), response(404, "hello"), true},
		{"410", request("GET", page), response(410, "hello"), true},
		{"204", request("GET", page), response(204, ""), false},
		{"206", request("GET", page), response(206, "hello"), false},
		{"302", request("GET", page), response(302, "", "Location", "/x"), false},
		{"304", request("GET", page), response(304, ""), false},
		{"500", request("GET", page), response(500, "hello"), false},
		{"HEAD", request("HEAD", page), response(200, ""), false},
		{"POST", request("POST", page), response(200, "hello"), false},
		{"no-store", request("GET", page), response(200, "hello", "Cache-Control", "no-store"), false},
		{"no-store among others, any case", request("GET", page), response(200, "hello", "Cache-Control", "max-age=60, No-Store"), false},
		{"no-store on a second line", request("GET", page), response(200, "hello", "Cache-Control", "max-age=60", "Cache-Control", "no-store"), false},
		{"private", request("GET", page), response(200, "hello", "Cache-Control", "private"), false},
		{"private with empty field list", request("GET", page), response(200, "hello", "Cache-Control", `private=""`), false},
		{"private naming a field", request("GET", page), response(200, "hello", "Cache-Control", `private="X-User"`), true},
		{"private token form", request("GET", page), response(200, "hello", "Cache-Control", "private=X-User"), false},
		{"quoted comma before no-store", request("GET", page), response(200, "hello", "Cache-Control", `private="a, b", no-store`), false},
		{"no-store only inside quotes", request("GET", page), response(200, "hello", "Cache-Control", `no-cache="no-store"`), true},
		{"no-cache", request("GET", page), response(200, "hello", "Cache-Control", "no-cache"), true},
		{"must-revalidate", request("GET", page), response(200, "hello", "Cache-Control", "max-age=60, must-revalidate"), false},
		{"proxy-revalidate", request("GET", page), response(200, "hello", "Cache-Control", "proxy-revalidate"), false},
		{"s-maxage implies proxy-revalidate", request("GET", page), response(200, "hello", "Cache-Control", "s-maxage=60"), false},
		{"s-maxage with stale-if-error", request("GET", page), response(200, "hello", "Cache-Control", "s-maxage=60, stale-if-error=600"), true},
		{"Set-Cookie", request("GET", page), response(200, "hello", "Set-Cookie", "id=1"), false},
		{"Set-Cookie even if public", request("GET", page), response(200, "hello", "Set-Cookie", "id=1", "Cache-Control", "public"), false},
		{"request Cookie", request("GET", page, "Cookie", "id=1"), response(200, "hello"), false},
		{"request Cookie even if public", request("GET", page, "Cookie", "id=1"), response(200, "hello", "Cache-Control", "public"), false},
		{"Authorization", request("GET", page, "Authorization", "Bearer x"), response(200, "hello"), false},
		{"Authorization and public", request("GET", page, "Authorization", "Bearer x"), response(200, "hello", "Cache-Control", "public, max-age=60"), true},
		{"Authorization, public and no-store", request("GET", page, "Authorization", "Bearer x"), response(200, "hello", "Cache-Control", "public, no-store"), false},
		{"request no-store", request("GET", page, "Cache-Control", "no-store"), response(200, "hello"), false},
		{"request no-cache", request("GET", page, "Cache-Control", "no-cache"), response(200, "hello"), true},
		{"Vary: *", request("GET", page), response(200, "hello", "Vary", "*"), false},
		{"Vary with * in a list", request("GET", page), response(200, "hello", "Vary", "Accept-Encoding, *"), false},
		{"Vary on a header", request("GET", page, "Accept-Encoding", "gzip"), response(200, "hello", "Vary", "Accept-Encoding"), true},
		{"too old on arrival for stale-if-error", request("GET", page), response(200, "hello", "Age", "120", "Cache-Control", "stale-if-error=60"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, 1<<20, newFakeClock())
			recorded := store(t, c, tt.req, tt.resp, "hello")
			_, hit := c.Lookup(tt.req)
			if recorded != tt.want || hit != tt.want {
				t.Errorf("Record then Lookup(%s %s) = recorded %v, hit %v, want %v", tt.req.Method, tt.req.URL, recorded, hit, tt.want)
			}
			want := int64(1)
			if tt.want {
				want = 0
			}
			if got := c.Stats().Rejected; got != want {
				t.Errorf("Stats().Rejected = %d, want %d", got, want)
			}
		})
	}
}

func TestLookupKey(t *testing.T) {
	tests := []struct {
		name   string
		stored string
		method string
		lookup string
		want   bool
	}{
		{"same", "http://app.example.com/a?b=1", "GET", "http://app.example.com/a?b=1", true},
		{"host case and port", "http://app.example.com/a", "GET", "http://APP.Example.com:8443/a", true},
		{"host trailing dot", "http://app.example.com/a", "GET", "http://app.example.com./a", true},
		{"HEAD from GET", "http://app.example.com/a", "HEAD", "http://app.example.com/a", true},
		{"bare question mark", "http://app.example.com/a", "GET", "http://app.example.com/a?", true},
		{"POST", "http://app.example.com/a", "POST", "http://app.example.com/a", false},
		{"PUT", "http://app.example.com/a", "PUT", "http://app.example.com/a", false},
		{"other host", "http://app.example.com/a", "GET", "http://www.example.com/a", false},
		{"other query", "http://app.example.com/a?b=1", "GET", "http://app.example.com/a?b=2", false},
		{"query order", "http://app.example.com/a?b=1&c=2", "GET", "http://app.example.com/a?c=2&b=1", false},
		{"no query", "http://app.example.com/a?b=1", "GET", "http://app.example.com/a", false},
		{"escaped slash", "http://app.example.com/a%2Fb", "GET", "http://app.example.com/a/b", false},
		{"path case", "http://app.example.com/A", "GET", "http://app.example.com/a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, 1<<20, newFakeClock())
			if !store(t, c, request("GET", tt.stored), response(200, "hello"), "hello") {
				t.Fatalf("Capture(GET %s) = nil, want a capture", tt.stored)
			}
			if _, hit := c.Lookup(request(tt.method, tt.lookup)); hit != tt.want {
				t.Errorf("Lookup(%s %s) after storing %s = %v, want %v", tt.method, tt.lookup, tt.stored, hit, tt.want)
			}
		})
	}
}

func TestKeyOf(t *testing.T) {
	tests := []struct {
		target string
		want   stale.Key
		str    string
	}{
		{"http://App.Example.COM:8080/a?b=1", stale.Key{Host: "app.example.com", Path: "/a", Query: "b=1"}, "app.example.com/a?b=1"},
		{"http://app.example.com./", stale.Key{Host: "app.example.com", Path: "/"}, "app.example.com/"},
		{"http://h/a%2Fb", stale.Key{Host: "h", Path: "/a%2Fb"}, "h/a%2Fb"},
		{"http://h/a%20b?", stale.Key{Host: "h", Path: "/a%20b"}, "h/a%20b"},
		{"http://[::1]:80/x?y", stale.Key{Host: "[::1]", Path: "/x", Query: "y"}, "[::1]/x?y"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			for _, method := range []string{"GET", "HEAD"} {
				if got := stale.KeyOf(request(method, tt.target)); got != tt.want {
					t.Errorf("KeyOf(%s %s) = %+v, want %+v", method, tt.target, got, tt.want)
				}
			}
			if got := tt.want.String(); got != tt.str {
				t.Errorf("%+v.String() = %q, want %q", tt.want, got, tt.str)
			}
		})
	}
}

func TestVary(t *testing.T) {
	tests := []struct {
		name   string
		vary   []string // Vary field lines of the stored response
		stored []string // request header pairs of the stored request
		lookup []string // request header pairs of the lookup
		want   bool
	}{
		{"same value", []string{"Accept-Encoding"}, []string{"Accept-Encoding", "gzip"}, []string{"Accept-Encoding", "gzip"}, true},
		{"other value", []string{"Accept-Encoding"}, []string{"Accept-Encoding", "gzip"}, []string{"Accept-Encoding", "br"}, false},
		{"value missing", []string{"Accept-Encoding"}, []string{"Accept-Encoding", "gzip"}, nil, false},
		{"value added", []string{"Accept-Encoding"}, nil, []string{"Accept-Encoding", "gzip"}, false},
		{"absent in both", []string{"X-Flavor"}, nil, nil, true},
		{"unvaried header differs", []string{"Accept-Encoding"}, []string{"Accept-Encoding", "gzip", "User-Agent", "a"}, []string{"Accept-Encoding", "gzip", "User-Agent", "b"}, true},
		{"field name case", []string{"accept-encoding"}, []string{"Accept-Encoding", "gzip"}, []string{"Accept-Encoding", "gzip"}, true},
		{"two fields, one line", []string{"Accept-Encoding, Accept-Language"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "de"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "de"}, true},
		{"two fields, second differs", []string{"Accept-Encoding, Accept-Language"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "de"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "fr"}, false},
		{"two lines, second differs", []string{"Accept-Encoding", "Accept-Language"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "de"}, []string{"Accept-Encoding", "gzip", "Accept-Language", "fr"}, false},
		{"repeated values match", []string{"Accept"}, []string{"Accept", "a", "Accept", "b"}, []string{"Accept", "a", "Accept", "b"}, true},
		{"repeated values in another order", []string{"Accept"}, []string{"Accept", "a", "Accept", "b"}, []string{"Accept", "b", "Accept", "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, 1<<20, newFakeClock())
			resp := response(200, "hello")
			resp.Header["Vary"] = tt.vary
			if !store(t, c, request("GET", page, tt.stored...), resp, "hello") {
				t.Fatalf("Capture(Vary %q) = nil, want a capture", tt.vary)
			}
			if _, hit := c.Lookup(request("GET", page, tt.lookup...)); hit != tt.want {
				t.Errorf("Lookup(%q) of Vary %q stored for %q = %v, want %v", tt.lookup, tt.vary, tt.stored, hit, tt.want)
			}
		})
	}
}

// lookupBody returns the body c serves for req, or "" on a miss.
func lookupBody(tb testing.TB, c *stale.Cache, req *http.Request) string {
	tb.Helper()
	w, ok := serve(tb, c, req)
	if !ok {
		return ""
	}
	return w.Body.String()
}

func TestVariants(t *testing.T) {
	c := newCache(t, 1<<20, newFakeClock())
	put := func(lang, body string) {
		t.Helper()
		if !store(t, c, request("GET", page, "Accept-Language", lang), response(200, body, "Vary", "Accept-Language"), body) {
			t.Fatalf("Capture(Accept-Language %s) = nil, want a capture", lang)
		}
	}
	put("de", "de1")
	put("fr", "fr1")
	put("de", "de2") // replaces the first de
	for _, tt := range []struct{ lang, want string }{{"de", "de2"}, {"fr", "fr1"}, {"en", ""}} {
		if got := lookupBody(t, c, request("GET", page, "Accept-Language", tt.lang)); got != tt.want {
			t.Errorf("Lookup(Accept-Language %s) body = %q, want %q", tt.lang, got, tt.want)
		}
	}
	if got, want := c.Stats().Entries, int64(2); got != want {
		t.Errorf("Stats().Entries = %d, want %d", got, want)
	}

	// A key keeps 4 variants; a fifth pushes out the oldest.
	put("en", "en1")
	put("it", "it1")
	put("es", "es1")
	for _, tt := range []struct{ lang, want string }{{"fr", ""}, {"de", "de2"}, {"en", "en1"}, {"it", "it1"}, {"es", "es1"}} {
		if got := lookupBody(t, c, request("GET", page, "Accept-Language", tt.lang)); got != tt.want {
			t.Errorf("after 5 variants, Lookup(Accept-Language %s) body = %q, want %q", tt.lang, got, tt.want)
		}
	}
	if s := c.Stats(); s.Entries != 4 || s.Evictions != 1 {
		t.Errorf("Stats() = %d entries, %d evictions, want 4, 1", s.Entries, s.Evictions)
	}

	// The origin stops varying: its newest answer replaces every variant.
	put2 := response(200, "any")
	if !store(t, c, request("GET", page, "Accept-Language", "de"), put2, "any") {
		t.Fatal("Capture(no Vary) = nil, want a capture")
	}
	if got, want := lookupBody(t, c, request("GET", page, "Accept-Language", "es")), "any"; got != want {
		t.Errorf("after Vary dropped, Lookup(Accept-Language es) body = %q, want %q", got, want)
	}
	if got, want := c.Stats().Entries, int64(1); got != want {
		t.Errorf("after Vary dropped, Stats().Entries = %d, want %d", got, want)
	}
}

func TestStaleness(t *testing.T) {
	tests := []struct {
		name  string
		kv    []string // response header pairs
		after time.Duration
		want  bool
	}{
		{"fresh", nil, 0, true},
		{"within MaxStale", nil, 59 * time.Minute, true},
		{"at MaxStale", nil, time.Hour, true},
		{"past MaxStale", nil, time.Hour + time.Second, false},
		{"at stale-if-error", []string{"Cache-Control", "stale-if-error=60"}, 60 * time.Second, true},
		{"past stale-if-error", []string{"Cache-Control", "stale-if-error=60"}, 61 * time.Second, false},
		{"stale-if-error after max-age", []string{"Cache-Control", "max-age=600, stale-if-error=1200"}, 1800 * time.Second, true},
		{"past max-age plus stale-if-error", []string{"Cache-Control", "max-age=600, stale-if-error=1200"}, 1801 * time.Second, false},
		{"s-maxage counts over max-age", []string{"Cache-Control", "max-age=10, s-maxage=600, stale-if-error=60"}, 660 * time.Second, true},
		{"MaxStale bounds a longer stale-if-error", []string{"Cache-Control", "stale-if-error=86400"}, time.Hour + time.Second, false},
		{"arrival Age counts against stale-if-error", []string{"Age", "30", "Cache-Control", "stale-if-error=60"}, 30 * time.Second, true},
		{"arrival Age, past stale-if-error", []string{"Age", "30", "Cache-Control", "stale-if-error=60"}, 31 * time.Second, false},
		{"arrival Age does not shorten MaxStale", []string{"Age", "600"}, time.Hour, true},
		{"duplicate stale-if-error keeps the smaller", []string{"Cache-Control", "stale-if-error=600, stale-if-error=60"}, 61 * time.Second, false},
		{"invalid stale-if-error counts as 0", []string{"Cache-Control", "max-age=10, stale-if-error=soon"}, 11 * time.Second, false},
		{"no-cache still served", []string{"Cache-Control", "no-cache"}, 30 * time.Minute, true},
		{"must-revalidate never served", []string{"Cache-Control", "must-revalidate"}, 0, false},
		{"proxy-revalidate never served", []string{"Cache-Control", "proxy-revalidate, stale-if-error=60"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			c := newCache(t, 1<<20, clock)
			req := request("GET", page)
			store(t, c, req, response(200, "hello", tt.kv...), "hello")
			clock.Advance(tt.after)
			if _, hit := c.Lookup(req); hit != tt.want {
				t.Errorf("Lookup %v after storing %q = %v, want %v", tt.after, tt.kv, hit, tt.want)
			}
		})
	}
}

func TestExpiredEvicted(t *testing.T) {
	clock := newFakeClock()
	c := newCache(t, 1<<20, clock)
	// One entry bounded by stale-if-error, found expired by Lookup, and
	// one by MaxStale, swept when anything touches the cache.
	short := request("GET", "http://app.example.com/short")
	long := request("GET", "http://app.example.com/long")
	store(t, c, short, response(200, "s", "Cache-Control", "stale-if-error=60"), "s")
	store(t, c, long, response(200, "l"), "l")
	clock.Advance(2 * time.Minute)
	if _, hit := c.Lookup(short); hit {
		t.Fatalf("Lookup(short) after 2m = hit, want miss")
	}
	if s := c.Stats(); s.Entries != 1 || s.Expired != 1 {
		t.Errorf("after expired lookup, Stats() = %d entries, %d expired, want 1, 1", s.Entries, s.Expired)
	}
	clock.Advance(time.Hour)
	if _, hit := c.Lookup(request("GET", "http://app.example.com/other")); hit {
		t.Fatalf("Lookup(other) = hit, want miss")
	}
	if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 || s.Expired != 2 {
		t.Errorf("after MaxStale, Stats() = %d entries, %d bytes, %d expired, want 0, 0, 2", s.Entries, s.Bytes, s.Expired)
	}
}

func TestServe(t *testing.T) {
	clock := newFakeClock()
	c := newCache(t, 1<<20, clock)
	resp := response(404, "hello",
		"Content-Type", "text/plain",
		"Etag", `"v1"`,
		"Cache-Control", `no-cache="X-Debug", private="X-User", max-age=5`,
		"X-User", "bob",
		"X-Debug", "trace",
		"Connection", "X-Hop",
		"X-Hop", "1",
		"Keep-Alive", "timeout=5",
		"Transfer-Encoding", "chunked",
		"Trailer", "X-Checksum",
		"Age", "5",
		stale.StaleHeader, "0",
	)
	store(t, c, request("GET", page), resp, "hello")
	clock.Advance(90*time.Second + 500*time.Millisecond)

	for _, method := range []string{"GET", "HEAD"} {
		t.Run(method, func(t *testing.T) {
			req := request(method, page)
			w, ok := serve(t, c, req)
			if !ok {
				t.Fatalf("Lookup(%s) = miss, want hit", method)
			}
			if got, want := w.Code, 404; got != want {
				t.Errorf("ServeHTTP(%s) status = %d, want %d", method, got, want)
			}
			wantBody := "hello"
			if method == "HEAD" {
				wantBody = ""
			}
			if got := w.Body.String(); got != wantBody {
				t.Errorf("ServeHTTP(%s) body = %q, want %q", method, got, wantBody)
			}
			for k, want := range map[string]string{
				"Content-Type":    "text/plain",
				"Etag":            `"v1"`,
				"Content-Length":  "5",
				"Age":             "95", // 5 on arrival + 90.5s stored, in whole seconds
				stale.StaleHeader: "1",
			} {
				if got := w.Header().Values(k); len(got) != 1 || got[0] != want {
					t.Errorf("ServeHTTP(%s) header %s = %q, want [%q]", method, k, got, want)
				}
			}
			for _, k := range []string{"X-User", "X-Debug", "Connection", "X-Hop", "Keep-Alive", "Transfer-Encoding", "Trailer"} {
				if got := w.Header().Values(k); len(got) != 0 {
					t.Errorf("ServeHTTP(%s) header %s = %q, want none", method, k, got)
				}
			}
		})
	}

	// A caller adding to a served header must not change the stored one.
	w, _ := serve(t, c, request("GET", page))
	w.Header().Add("Etag", "tampered")
	w, _ = serve(t, c, request("GET", page))
	if got := w.Header().Values("Etag"); len(got) != 1 {
		t.Errorf("after Header().Add on an earlier answer, Etag = %q, want one value", got)
	}
}

func TestHitAge(t *testing.T) {
	clock := newFakeClock()
	c := newCache(t, 1<<20, clock)
	req := request("GET", page)
	store(t, c, req, response(200, "hello", "Age", "7"), "hello")
	clock.Advance(3 * time.Second)
	hit, ok := c.Lookup(req)
	if got, want := hit.Age(), 10*time.Second; !ok || got != want {
		t.Errorf("Lookup(req).Age() = %v, %v, want %v, true", got, ok, want)
	}
}

func TestInvalidate(t *testing.T) {
	tests := []struct {
		name string
		req  *http.Request
		resp *http.Response
		want bool // still served afterwards
	}{
		{"no-store drops it", request("GET", page), response(200, "new", "Cache-Control", "no-store"), false},
		{"private drops it", request("GET", page), response(200, "new", "Cache-Control", "private"), false},
		{"must-revalidate drops it", request("GET", page), response(200, "new", "Cache-Control", "must-revalidate"), false},
		{"Vary: * drops it", request("GET", page), response(200, "new", "Vary", "*"), false},
		{"private answer to Authorization keeps it", request("GET", page, "Authorization", "Bearer x"), response(200, "mine", "Cache-Control", "private"), true},
		{"answer to Cookie keeps it", request("GET", page, "Cookie", "a=1"), response(200, "mine", "Cache-Control", "no-store"), true},
		{"error status keeps it", request("GET", page), response(500, "oops", "Cache-Control", "no-store"), true},
		{"other key keeps it", request("GET", page+"/other"), response(200, "new", "Cache-Control", "no-store"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, 1<<20, newFakeClock())
			store(t, c, request("GET", page), response(200, "old"), "old")
			if store(t, c, tt.req, tt.resp, "xx") {
				t.Fatalf("Capture(%s %s) accepted the second response, want nil", tt.req.Method, tt.req.URL)
			}
			if _, hit := c.Lookup(request("GET", page)); hit != tt.want {
				t.Errorf("Lookup after %s = %v, want %v", tt.name, hit, tt.want)
			}
			want := int64(1)
			if tt.want {
				want = 0
			}
			if got := c.Stats().Invalidated; got != want {
				t.Errorf("Stats().Invalidated = %d, want %d", got, want)
			}
		})
	}
}

// entrySize returns what one entry stored by put costs, measured in a
// roomy cache.
func entrySize(tb testing.TB, put func(*stale.Cache, string)) int64 {
	tb.Helper()
	c := newCache(tb, 1<<20, newFakeClock())
	put(c, "/k0")
	return c.Stats().Bytes
}

func TestLRUEvictionOrder(t *testing.T) {
	put := func(c *stale.Cache, path string) {
		store(t, c, request("GET", "http://app.example.com"+path), response(200, "0123456789"), "0123456789")
	}
	size := entrySize(t, put)
	// Room for 8 entries and a half: the ninth evicts one.
	c := newCache(t, 8*size+size/2, newFakeClock())
	for i := range 8 {
		put(c, fmt.Sprintf("/k%d", i))
	}
	if _, hit := c.Lookup(request("GET", "http://app.example.com/k0")); !hit {
		t.Fatal("Lookup(/k0) = miss, want hit")
	}
	put(c, "/k8") // /k1 is now the least recently used
	for i := range 9 {
		path := fmt.Sprintf("/k%d", i)
		want := i != 1
		if _, hit := c.Lookup(request("GET", "http://app.example.com"+path)); hit != want {
			t.Errorf("Lookup(%s) = %v, want %v", path, hit, want)
		}
	}
	if s := c.Stats(); s.Entries != 8 || s.Evictions != 1 || s.Bytes != 8*size {
		t.Errorf("Stats() = %d entries, %d evictions, %d bytes, want 8, 1, %d", s.Entries, s.Evictions, s.Bytes, 8*size)
	}
}

func TestByteBound(t *testing.T) {
	const maxBytes = 64 << 10
	c := newCache(t, maxBytes, newFakeClock())
	rng := rand.New(rand.NewPCG(1, 2))
	chunk := make([]byte, 3000)
	for i := range 3000 {
		req := request("GET", fmt.Sprintf("http://h%d.example.com/%d?q=%d", rng.IntN(5), rng.IntN(60), i%7))
		n := rng.IntN(10 << 10) // some exceed the per-entry bound of 8 KiB
		resp := response(200, "")
		resp.ContentLength = int64(n)
		if i%2 == 0 {
			resp.ContentLength = -1 // unknown: the buffer grows
		}
		resp.Header.Set("X-Pad", strings.Repeat("p", rng.IntN(200)))
		rec := c.Capture(req, resp)
		for left := n; left > 0; {
			w := min(left, 1+rng.IntN(len(chunk)))
			rec.Write(chunk[:w])
			left -= w
		}
		rec.Finish(true)
		if s := c.Stats(); s.Bytes > maxBytes || s.Bytes < 0 {
			t.Fatalf("after insert %d, Stats().Bytes = %d, want 0..%d", i, s.Bytes, maxBytes)
		}
	}
	if s := c.Stats(); s.Evictions == 0 || s.Rejected == 0 || s.Entries == 0 {
		t.Errorf("after 3000 records, Stats() = %+v, want evictions, rejections and entries", s)
	}
}

func TestOversized(t *testing.T) {
	const maxBytes = 64 << 10
	bound := maxBytes / 8

	t.Run("declared length", func(t *testing.T) {
		c := newCache(t, maxBytes, newFakeClock())
		resp := response(200, "")
		resp.ContentLength = int64(bound)
		if rec := c.Capture(request("GET", page), resp); rec != nil {
			t.Errorf("Capture(Content-Length %d) = a capture, want nil", bound)
		}
		if got, want := c.Stats().Rejected, int64(1); got != want {
			t.Errorf("Stats().Rejected = %d, want %d", got, want)
		}
	})

	t.Run("unknown length", func(t *testing.T) {
		c := newCache(t, maxBytes, newFakeClock())
		resp := response(200, "")
		resp.ContentLength = -1
		rec := c.Capture(request("GET", page), resp)
		if rec == nil {
			t.Fatal("Capture(unknown length) = nil, want a capture")
		}
		chunk := make([]byte, 1000)
		written := 0
		for written <= bound {
			if n, err := rec.Write(chunk); n != len(chunk) || err != nil {
				t.Fatalf("Write after %d bytes = %d, %v, want %d, nil", written, n, err, len(chunk))
			}
			written += len(chunk)
			if got := rec.BufferedForTest(); got > bound {
				t.Fatalf("after writing %d bytes, buffered %d, want at most %d", written, got, bound)
			}
		}
		if got := rec.BufferedForTest(); got != 0 {
			t.Errorf("after overflow, buffered %d, want 0", got)
		}
		rec.Finish(true)
		if _, hit := c.Lookup(request("GET", page)); hit {
			t.Error("Lookup after an oversized body = hit, want miss")
		}
		if s := c.Stats(); s.Rejected != 1 || s.Discarded != 0 || s.Bytes != 0 {
			t.Errorf("Stats() = %d rejected, %d discarded, %d bytes, want 1, 0, 0", s.Rejected, s.Discarded, s.Bytes)
		}
	})

	t.Run("huge headers", func(t *testing.T) {
		c := newCache(t, maxBytes, newFakeClock())
		resp := response(200, "x", "X-Pad", strings.Repeat("p", bound))
		if rec := c.Capture(request("GET", page), resp); rec != nil {
			t.Errorf("Capture(%d-byte header) = a capture, want nil", bound)
		}
	})
}

func TestIncomplete(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		finish []bool
		want   bool
	}{
		{"complete", []string{"hel", "lo"}, []bool{true}, true},
		{"visitor left", []string{"hel"}, []bool{false}, false},
		{"body failed after all bytes", []string{"hello"}, []bool{false}, false},
		{"shorter than Content-Length", []string{"hel"}, []bool{true}, false},
		{"longer than Content-Length", []string{"hello", "!"}, []bool{true}, false},
		{"first Finish counts", []string{"hello"}, []bool{false, true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, 1<<20, newFakeClock())
			rec := c.Capture(request("GET", page), response(200, "hello"))
			for _, p := range tt.writes {
				rec.Write([]byte(p))
			}
			for _, complete := range tt.finish {
				rec.Finish(complete)
			}
			if _, hit := c.Lookup(request("GET", page)); hit != tt.want {
				t.Errorf("Lookup after writes %q, Finish%v = %v, want %v", tt.writes, tt.finish, hit, tt.want)
			}
			want := int64(1)
			if tt.want {
				want = 0
			}
			if got := c.Stats().Discarded; got != want {
				t.Errorf("Stats().Discarded = %d, want %d", got, want)
			}
		})
	}
}

func TestWriteAfterFinish(t *testing.T) {
	c := newCache(t, 1<<20, newFakeClock())
	rec := c.Capture(request("GET", page), response(200, "hello"))
	rec.Write([]byte("hello"))
	rec.Finish(true)
	if n, err := rec.Write([]byte("more")); n != 4 || err != nil {
		t.Errorf("Write after Finish = %d, %v, want 4, nil", n, err)
	}
	rec.Finish(true)
	if got, want := lookupBody(t, c, request("GET", page)), "hello"; got != want {
		t.Errorf("body after late Write = %q, want %q", got, want)
	}
	if got, want := c.Stats().Stores, int64(1); got != want {
		t.Errorf("Stats().Stores = %d, want %d", got, want)
	}
}

func TestNilCapture(t *testing.T) {
	var rec *stale.Capture
	if n, err := rec.Write([]byte("abc")); n != 3 || err != nil {
		t.Errorf("(*Recording)(nil).Write(3 bytes) = %d, %v, want 3, nil", n, err)
	}
	rec.Finish(true) // must not panic
}

func TestDisabled(t *testing.T) {
	clock := newFakeClock()
	tests := []struct {
		name string
		cfg  stale.Config
	}{
		{"zero config", stale.Config{}},
		{"zero MaxBytes", stale.Config{MaxStale: time.Hour, Now: clock.Now}},
		{"zero MaxStale", stale.Config{MaxBytes: 1 << 20, Now: clock.Now}},
	}
	check := func(t *testing.T, c *stale.Cache) {
		t.Helper()
		if rec := c.Capture(request("GET", page), response(200, "hello")); rec != nil {
			t.Errorf("Record = a capture, want nil")
		}
		if _, hit := c.Lookup(request("GET", page)); hit {
			t.Errorf("Lookup = hit, want miss")
		}
		if got := c.Stats(); got != (stale.Stats{}) {
			t.Errorf("Stats() = %+v, want zero", got)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := stale.New(tt.cfg)
			if err != nil {
				t.Fatalf("New(%+v) = %v, want no error", tt.cfg, err)
			}
			check(t, c)
		})
	}
	t.Run("nil cache", func(t *testing.T) { check(t, nil) })
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  stale.Config
		errs int
	}{
		{"zero", stale.Config{}, 0},
		{"defaults", stale.Config{MaxBytes: 64 << 20, MaxStale: time.Hour}, 0},
		{"negative MaxBytes", stale.Config{MaxBytes: -1, MaxStale: time.Hour}, 1},
		{"negative MaxStale", stale.Config{MaxBytes: 1, MaxStale: -time.Second}, 1},
		{"both negative", stale.Config{MaxBytes: -1, MaxStale: -time.Second}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			got := 0
			if err != nil {
				got = 1
				var joined interface{ Unwrap() []error }
				if errors.As(err, &joined) {
					got = len(joined.Unwrap())
				}
			}
			if got != tt.errs {
				t.Errorf("Validate(%+v) = %v (%d problems), want %d problems", tt.cfg, err, got, tt.errs)
			}
			if _, err := stale.New(tt.cfg); (err != nil) != (tt.errs > 0) {
				t.Errorf("New(%+v) error = %v, want error %v", tt.cfg, err, tt.errs > 0)
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	const maxBytes = 32 << 10
	clock := newFakeClock()
	c := newCache(t, maxBytes, clock)
	var wg sync.WaitGroup
	var lookups sync.Map // goroutine → lookups made
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			n := 0
			for i := range 400 {
				path := fmt.Sprintf("/k%d", rng.IntN(16))
				body := strings.Repeat(path, 1+rng.IntN(300))
				req := request("GET", "http://app.example.com"+path, "Accept-Encoding", []string{"gzip", "br"}[i%2])
				switch rng.IntN(3) {
				case 0:
					store(t, c, req, response(200, body, "Vary", "Accept-Encoding"), body)
				case 1:
					clock.Advance(time.Second)
					fallthrough
				default:
					n++
					if w, ok := serve(t, c, req); ok && strings.ReplaceAll(w.Body.String(), path, "") != "" {
						t.Errorf("Lookup(%s) body = %.40q…, want repetitions of %q", path, w.Body.String(), path)
					}
				}
				if s := c.Stats(); s.Bytes > maxBytes {
					t.Errorf("Stats().Bytes = %d, want at most %d", s.Bytes, maxBytes)
				}
			}
			lookups.Store(g, n)
		})
	}
	wg.Wait()
	total := int64(0)
	lookups.Range(func(_, v any) bool { total += int64(v.(int)); return true })
	if s := c.Stats(); s.Hits+s.Misses != total || s.Hits == 0 {
		t.Errorf("Stats() = %d hits + %d misses, want %d lookups with some hits", s.Hits, s.Misses, total)
	}
}

func TestLookupAllocs(t *testing.T) {
	c := newCache(t, 1<<20, newFakeClock())
	req := request("GET", page, "Accept-Encoding", "gzip")
	store(t, c, req, response(200, "hello", "Vary", "Accept-Encoding"), "hello")
	if got := testing.AllocsPerRun(100, func() {
		if _, ok := c.Lookup(req); !ok {
			t.Fatal("Lookup = miss, want hit")
		}
	}); got != 0 {
		t.Errorf("Lookup allocs = %v, want 0", got)
	}
}

func BenchmarkLookup(b *testing.B) {
	c := newCache(b, 64<<20, newFakeClock())
	body := strings.Repeat("x", 4096)
	for i := range 1000 {
		store(b, c, request("GET", fmt.Sprintf("http://app.example.com/p/%d", i), "Accept-Encoding", "gzip"),
			response(200, body, "Content-Type", "text/html", "Vary", "Accept-Encoding"), body)
	}
	req := request("GET", "http://app.example.com/p/500", "Accept-Encoding", "gzip")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Lookup(req); !ok {
			b.Fatal("Lookup = miss, want hit")
		}
	}
}

func BenchmarkCapture(b *testing.B) {
	c := newCache(b, 64<<20, newFakeClock())
	body := []byte(strings.Repeat("x", 4096))
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = request("GET", fmt.Sprintf("http://app.example.com/p/%d", i), "Accept-Encoding", "gzip")
	}
	resp := response(200, string(body), "Content-Type", "text/html", "Vary", "Accept-Encoding", "Cache-Control", "max-age=60")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	i := 0
	for b.Loop() {
		rec := c.Capture(reqs[i%len(reqs)], resp)
		rec.Write(body[:2048])
		rec.Write(body[2048:])
		rec.Finish(true)
		i++
	}
}

func BenchmarkServe(b *testing.B) {
	c := newCache(b, 64<<20, newFakeClock())
	body := strings.Repeat("x", 4096)
	req := request("GET", page)
	store(b, c, req, response(200, body, "Content-Type", "text/html"), body)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		hit, ok := c.Lookup(req)
		if !ok {
			b.Fatal("Lookup = miss, want hit")
		}
		clear(w.h)
		hit.ServeHTTP(w, req)
	}
}

// discardWriter is a ResponseWriter that keeps headers and drops the rest.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
