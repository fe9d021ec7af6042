package router

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
)

// readingConn reads the whole request body, like a client forwarding it,
// and keeps what it read.
type readingConn struct {
	*fakeConn
	bodies chan string
}

func (c *readingConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	c.bodies <- string(b)
	return c.fakeConn.RoundTrip(req, service)
}

func newInspector(t *testing.T) *inspect.Inspector {
	t.Helper()
	in, err := inspect.New(inspect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestInspectCapture(t *testing.T) {
	in := newInspector(t)
	rt := newRouter(t, Config{Inspector: in, IPLimitMax: 2, IPLimitRefill: 0.0001})
	c := &readingConn{fakeConn: newConn("cli", 1), bodies: make(chan string, 8)}
	rt.reg.update(c, ann(svc("", "app.test", "other.test")))
	if _, err := in.Start("app.test", inspect.Options{InspectRequest: apitype.InspectRequest{BodyBytes: 16}}); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("0123456789", 10) // 100 bytes, more than body_bytes
	req := httptest.NewRequest("POST", "/path?q=1", strings.NewReader(body))
	req.Host = "app.test"
	req.Header.Set("Authorization", "Bearer secret")
	rec := httptest.NewRecorder()
	var tr telemetry.Request
	rt.Proxy(rec, req, &tr)
	if rec.Code != 200 {
		t.Fatalf("captured request = %d %s, want 200", rec.Code, rec.Body)
	}
	if got := <-c.bodies; got != body {
		t.Fatalf("backend received %d bytes, want the whole %d", len(got), len(body))
	}
	// Another hostname of the same client: not captured.
	other := httptest.NewRequest("GET", "/", nil)
	other.Host = "other.test"
	rt.ServeHTTP(httptest.NewRecorder(), other)
	// A refusal (the visitor's bucket runs dry): captured with its status.
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/refused", nil)
		r.Host = "app.test"
		r.RemoteAddr = "192.0.2.9:1234"
		rt.ServeHTTP(httptest.NewRecorder(), r)
	}
	for len(c.bodies) > 0 {
		<-c.bodies
	}

	cp := in.Capture("app.test")
	sums := cp.Requests()
	if len(sums) != 4 {
		t.Fatalf("captured %d requests of app.test, want 4 (other.test's not among them): %+v", len(sums), sums)
	}
	if sums[0].Status != http.StatusTooManyRequests || sums[0].Error == "" {
		t.Errorf("newest entry = %d %q, want the 429 with its reason", sums[0].Status, sums[0].Error)
	}
	e, err := cp.Entry(sums[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Method != "POST" || e.URL != "/path?q=1" || e.Response.Status != 200 || e.ClientID != "cli" {
		t.Errorf("entry = %s %s %d client %q", e.Method, e.URL, e.Response.Status, e.ClientID)
	}
	if string(e.Request.Body) != body[:16] || e.Request.BodySize != 100 || !e.Request.BodyTruncated {
		t.Errorf("request body %q size %d truncated %t, want the first 16 of 100, truncated", e.Request.Body, e.Request.BodySize, e.Request.BodyTruncated)
	}
	if got := e.Request.Header["Authorization"]; len(got) != 1 || got[0] != inspect.Redacted {
		t.Errorf("Authorization = %q, want redacted", got)
	}
	if string(e.Response.Body) != "cli/0" || e.Response.Header["Content-Type"][0] != "text/plain" {
		t.Errorf("response = %q %v", e.Response.Body, e.Response.Header)
	}
	tl := e.Timeline
	if tl.DispatchMS == nil || tl.ResponseHeadMS == nil || *tl.ResponseHeadMS < *tl.DispatchMS || tl.DoneMS < *tl.ResponseHeadMS {
		t.Errorf("timeline %+v: want dispatch ≤ response head ≤ done", tl)
	}
	if in.Capture("other.test") != nil {
		t.Error("other.test has a capture")
	}
}

// TestInspectNoCaptureAllocs pins the cost of the hook while a capture
// exists for another hostname: a request of an uncaptured hostname
// allocates what it did without the inspector.
func TestInspectNoCaptureAllocs(t *testing.T) {
	measure := func(in *inspect.Inspector) float64 {
		rt := newRouter(t, Config{Inspector: in})
		rt.reg.update(newConn("c", 1), ann(svc("", "app.test")))
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = "app.test"
		rec := httptest.NewRecorder()
		// The fewest of three runs: AllocsPerRun counts the process's
		// mallocs, and a background goroutine (the router's or the
		// runtime's) may allocate during one. A hook that allocates per
		// request adds to every run.
		least := math.Inf(1)
		for range 3 {
			least = min(least, testing.AllocsPerRun(50, func() {
				var tr telemetry.Request
				rt.Proxy(rec, req, &tr)
			}))
		}
		return least
	}
	base := measure(nil)
	in := newInspector(t)
	if got := measure(in); got != base {
		t.Errorf("allocations with an idle inspector = %v, want %v as without", got, base)
	}
	if _, err := in.Start("elsewhere.test", inspect.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := measure(in); got != base {
		t.Errorf("allocations with another hostname captured = %v, want %v", got, base)
	}
}
