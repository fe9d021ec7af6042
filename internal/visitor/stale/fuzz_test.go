package stale_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
)

// FuzzLookup stores and looks up arbitrary targets, hosts, headers,
// Cache-Control and Vary values. Nothing may panic, the byte bound must
// hold, and whatever is served must be the body that was stored.
func FuzzLookup(f *testing.F) {
	seeds := []struct{ target, host, name, value, cc, vary string }{
		{"/page", "app.example.com", "Accept-Encoding", "gzip", "", "Accept-Encoding"},
		{"/a%2Fb?x=1", "App.Example.COM:8080", "Cookie", "a=1", "public", ""},
		{"/", "[::1]:80", "Authorization", "Bearer x", "public, max-age=60", ""},
		{"*", "h", "Cache-Control", "no-store", `private="a, b", no-store`, "*"},
		{"/x", "h.", "X", "1", `no-cache="no-store`, "x, , y"},
		{"//a/../b?", "", "Age", "99999999999999999999", "stale-if-error=99999999999999999999", "Age"},
		{"/q", "a/b", "Vary", "\\", "max-age=\"1\", s-maxage, stale-if-error=", "Vary,Vary"},
		{"%zz", "h", "", "", "=,=,\"", ""},
	}
	for _, s := range seeds {
		f.Add(s.target, s.host, s.name, s.value, s.cc, s.vary)
	}
	const maxBytes = 16 << 10
	f.Fuzz(func(t *testing.T, target, host, name, value, cc, vary string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			u = &url.URL{Path: target}
		}
		req := &http.Request{Method: http.MethodGet, Host: host, URL: u, Header: http.Header{name: {value}}}
		resp := &http.Response{
			StatusCode:    http.StatusOK,
			Header:        http.Header{"Cache-Control": {cc}, "Vary": {vary}, name: {value}},
			ContentLength: -1,
		}
		clock := newFakeClock()
		c, err := stale.New(stale.Config{MaxBytes: maxBytes, MaxStale: time.Hour, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		k := stale.KeyOf(req)
		if got := stale.KeyOf(req); got != k {
			t.Fatalf("KeyOf twice = %+v then %+v", k, got)
		}
		if k.String() == "" && (k.Host != "" || k.Path != "" || k.Query != "") {
			t.Errorf("%+v.String() is empty", k)
		}

		rec := c.Capture(req, resp)
		rec.Write([]byte(value))
		rec.Finish(true)
		if s := c.Stats(); s.Bytes > maxBytes {
			t.Fatalf("Stats().Bytes = %d, want at most %d", s.Bytes, maxBytes)
		}
		clock.Advance(time.Minute)
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			req.Method = method
			hit, ok := c.Lookup(req)
			if !ok {
				continue
			}
			if rec == nil {
				t.Fatalf("Lookup(%s) hit though Record refused", method)
			}
			w := httptest.NewRecorder()
			hit.ServeHTTP(w, req)
			want := value
			if method == http.MethodHead {
				want = ""
			}
			if got := w.Body.String(); got != want {
				t.Errorf("ServeHTTP(%s) body = %q, want %q", method, got, want)
			}
		}
	})
}
