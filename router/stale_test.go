package router

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/tunnel"
)

func TestServeStaleThenFallbackThen504(t *testing.T) {
	c, err := stale.New(stale.Config{MaxBytes: 1 << 20, MaxStale: time.Hour, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	rt := newRouter(t, Config{Cache: c, GatewayTimeout: 20 * time.Millisecond, DownThreshold: time.Minute,
		Fallbacks: []Fallback{{Hostname: "app.test", URL: "https://status.example.com/"}}})
	conn := newConn("a", 1)
	a := ann(svc("", "app.test"))
	a.Services[0].Resilience = true
	rt.reg.update(conn, a)

	get := func(path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "app.test"
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/page"); rec.Code != 200 || rec.Body.String() != "a/0" {
		t.Fatalf("GET /page while up = %d %q, want 200 a/0", rec.Code, rec.Body.String())
	}
	// The client vanishes: the stored copy answers, marked stale.
	conn.err = fmt.Errorf("gone: %w", tunnel.ErrSessionClosed)
	rec := get("/page")
	if rec.Code != 200 || rec.Body.String() != "a/0" || rec.Header().Get(stale.StaleHeader) != "1" {
		t.Fatalf("GET /page with the client failing = %d %q (stale %q), want the stale copy", rec.Code, rec.Body.String(), rec.Header().Get(stale.StaleHeader))
	}
	// Nothing stored for another path: the failed exchange answers 502
	// (fallbacks apply when no client could be chosen at all, below).
	if rec := get("/other"); rec.Code != 502 {
		t.Fatalf("GET /other with the client failing = %d, want 502 (failover off, nothing stored)", rec.Code)
	}
	rt.reg.detach(conn)
	if rec := get("/page"); rec.Code != 200 || rec.Header().Get(stale.StaleHeader) != "1" {
		t.Fatalf("GET /page after the client left = %d, want the stale copy", rec.Code)
	}
	if rec := get("/other"); rec.Code != 302 || rec.Header().Get("Location") != "https://status.example.com/" {
		t.Fatalf("GET /other after the client left = %d %q, want the fallback redirect", rec.Code, rec.Header().Get("Location"))
	}
	// Without resilience nothing is recorded.
	plain := newRouter(t, Config{Cache: c, GatewayTimeout: 20 * time.Millisecond, DownThreshold: time.Minute})
	pc := newConn("p", 1)
	plain.reg.update(pc, ann(svc("", "plain.test")))
	req := httptest.NewRequest("GET", "/x", nil)
	req.Host = "plain.test"
	plain.ServeHTTP(httptest.NewRecorder(), req)
	plain.reg.detach(pc)
	rec = httptest.NewRecorder()
	plain.ServeHTTP(rec, req)
	if rec.Code != 504 {
		t.Fatalf("GET without resilience after the client left = %d, want 504 (nothing stored)", rec.Code)
	}
}
