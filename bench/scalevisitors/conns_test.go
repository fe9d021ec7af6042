package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCounts(t *testing.T) {
	if got, want := counts(map[int]int{502: 2, 0: 1, 200: 9997}), "0×1 200×9997 502×2"; got != want {
		t.Errorf("counts = %q, want %q", got, want)
	}
	if got := counts(nil); got != "" {
		t.Errorf("counts(nil) = %q, want empty", got)
	}
}

func TestSample(t *testing.T) {
	text := "# HELP aperio_requests_queued x\n# TYPE aperio_requests_queued gauge\n" +
		"aperio_requests_queued_total 5\naperio_requests_queued{host=\"a\"} 7\naperio_requests_queued 9999\n"
	if n, err := sample(strings.NewReader(text), "aperio_requests_queued"); err != nil || n != 9999 {
		t.Errorf("sample = %d, %v; want 9999", n, err)
	}
	if _, err := sample(strings.NewReader("other 1\n"), "aperio_requests_queued"); err == nil {
		t.Error("no sample: want an error")
	}
	if _, err := sample(strings.NewReader("aperio_requests_queued NaN\n"), "aperio_requests_queued"); err == nil {
		t.Error("NaN: want an error")
	}
}

// TestExchangeKeepsConnection: two requests on one connection, the
// second after the first's answer was read whole; an answer that closes
// the connection is an error.
func TestExchangeKeepsConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		w.Write([]byte(strings.Repeat("x", 5000)))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		if code, err := exchange(c, getRequest("a.test", "/"), 5*time.Second); err != nil || code != 200 {
			t.Fatalf("request %d: %d, %v", i, code, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
	if _, err := exchange(c, getRequest("a.test", "/close"), 5*time.Second); err == nil {
		t.Error("Connection: close answer: want an error")
	}
}

func TestParallel(t *testing.T) {
	seen := make([]atomic.Int32, 100)
	parallel(len(seen), 7, func(i int) { seen[i].Add(1) })
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("fn(%d) ran %d times, want 1", i, n)
		}
	}
	parallel(0, 3, func(int) { t.Fatal("ran with n = 0") })
}
