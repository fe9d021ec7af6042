package stale_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// newCache returns a cache of maxBytes and a one-hour MaxStale on clock.
func newCache(tb testing.TB, maxBytes int64, clock *fakeClock) *stale.Cache {
	tb.Helper()
	c, err := stale.New(stale.Config{MaxBytes: maxBytes, MaxStale: time.Hour, Now: clock.Now})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return c
}

// header builds a header from name, value pairs.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// request builds a visitor request for target with the header pairs kv.
func request(method, target string, kv ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Header = header(kv...)
	return r
}

// response builds a response of status with body length declared and the
// header pairs kv.
func response(status int, body string, kv ...string) *http.Response {
	h := header(kv...)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{StatusCode: status, Header: h, ContentLength: int64(len(body))}
}

// store offers resp to c as the answer to req, relays body through the
// recording in two writes and finishes it complete. It reports whether
// Record accepted the response.
func store(tb testing.TB, c *stale.Cache, req *http.Request, resp *http.Response, body string) bool {
	tb.Helper()
	rec := c.Capture(req, resp)
	if rec == nil {
		return false
	}
	half := len(body) / 2
	for _, p := range []string{body[:half], body[half:]} {
		if n, err := rec.Write([]byte(p)); n != len(p) || err != nil {
			tb.Fatalf("Capture.Write(%d bytes) = %d, %v, want %d, nil", len(p), n, err, len(p))
		}
	}
	rec.Finish(true)
	return true
}

// serve looks req up in c and, on a hit, serves it into a recorder.
func serve(tb testing.TB, c *stale.Cache, req *http.Request) (*httptest.ResponseRecorder, bool) {
	tb.Helper()
	hit, ok := c.Lookup(req)
	if !ok {
		return nil, false
	}
	w := httptest.NewRecorder()
	hit.ServeHTTP(w, req)
	return w, true
}
