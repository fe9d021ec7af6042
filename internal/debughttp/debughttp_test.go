package debughttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/internal/testkit/poll"
)

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		ok       bool
		loopback bool // refused for not being loopback (ErrNotLoopback)
	}{
		{"127.0.0.1:6060", true, false},
		{"127.0.0.1:0", true, false},
		{"127.1.2.3:6060", true, false},
		{"[::1]:6060", true, false},
		{"localhost:6060", true, false},
		{"LOCALHOST:6060", true, false},
		{"[::ffff:127.0.0.1]:6060", true, false},
		{":6060", false, true},
		{"0.0.0.0:6060", false, true},
		{"[::]:6060", false, true},
		{"192.168.1.10:6060", false, true},
		{"10.0.0.5:6060", false, true},
		{"8.8.8.8:6060", false, true},
		{"[fe80::1%lo]:6060", false, true},
		{"[::1%lo]:6060", false, true},
		{"example.com:6060", false, true},
		{"localhost.example.com:6060", false, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:http", false, false},
		{"127.0.0.1:65536", false, false},
		{"127.0.0.1:-1", false, false},
		{"", false, false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err := CheckAddr(tc.addr)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckAddr(%q) = %v, want ok %v", tc.addr, err, tc.ok)
			}
			if got := errors.Is(err, ErrNotLoopback); got != tc.loopback {
				t.Errorf("CheckAddr(%q) = %v, is ErrNotLoopback %v, want %v", tc.addr, err, got, tc.loopback)
			}
		})
	}
}

// listen starts a debug listener on a free loopback port, shut down at
// the test's end.
func listen(t testing.TB) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

func TestListenServesProfilesAndMetrics(t *testing.T) {
	s := listen(t)
	base := "http://" + s.Addr().String()
	for _, tc := range []struct {
		path string
		want string // in the body
	}{
		{"/debug/pprof/", "goroutine"},
		{"/debug/pprof/cmdline", "debughttp.test"},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
		{"/debug/pprof/heap?debug=1", "heap profile"},
		{"/debug/pprof/allocs?debug=1", "heap profile"},
		{"/debug/pprof/profile?seconds=1", ""},
		{"/debug/pprof/trace?seconds=0.1", "go 1."},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := get(t, base+tc.path)
			if code != http.StatusOK {
				t.Fatalf("GET %s = %d %q, want 200", tc.path, code, body)
			}
			if len(body) == 0 || !bytes.Contains(body, []byte(tc.want)) {
				t.Errorf("GET %s = %.200q, want it to contain %q", tc.path, body, tc.want)
			}
		})
	}
	code, body := get(t, base+MetricsPath)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d, want 200", MetricsPath, code)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("GET %s: %v", MetricsPath, err)
	}
	var goroutines uint64
	if err := json.Unmarshal(m["/sched/goroutines:goroutines"], &goroutines); err != nil || goroutines == 0 {
		t.Errorf("GET %s: /sched/goroutines:goroutines = %s, want a positive count", MetricsPath, m["/sched/goroutines:goroutines"])
	}
	var pauses histogram
	if err := json.Unmarshal(m["/sched/pauses/total/gc:seconds"], &pauses); err != nil {
		t.Errorf("GET %s: /sched/pauses/total/gc:seconds = %s: %v", MetricsPath, m["/sched/pauses/total/gc:seconds"], err)
	}
	if code, _ := get(t, base+"/"); code != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", code)
	}
}

func TestHostileRequests(t *testing.T) {
	s := listen(t)
	base := "http://" + s.Addr().String()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/debug/pprof/profile?seconds=61", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=86400", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=1e300", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=0", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=-5", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=NaN", http.StatusBadRequest},
		{"GET", "/debug/pprof/profile?seconds=abc", http.StatusBadRequest},
		{"GET", "/debug/pprof/trace?seconds=3600", http.StatusBadRequest},
		{"GET", "/debug/pprof/trace?seconds=Inf", http.StatusBadRequest},
		{"GET", "/debug/pprof/heap?seconds=100000", http.StatusBadRequest},
		{"GET", "/debug/pprof/allocs?seconds=61", http.StatusBadRequest},
		{"POST", "/debug/pprof/profile", http.StatusMethodNotAllowed},
		{"PUT", MetricsPath, http.StatusMethodNotAllowed},
		{"DELETE", "/debug/pprof/", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s %s took %v: the bound must answer at once", tc.method, tc.path, d)
			}
		})
	}
	t.Run("symbol body over 64 KiB", func(t *testing.T) {
		body := strings.Repeat("0x1+", 40<<10)
		resp, err := http.Post(base+"/debug/pprof/symbol", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		// pprof.Symbol answers what it could read, and why it stopped.
		if !bytes.Contains(got, []byte("request body too large")) {
			t.Errorf("POST /debug/pprof/symbol with %d bytes = %d %.200q, want the read stopped at 64 KiB", len(body), resp.StatusCode, got)
		}
	})
	t.Run("timeouts set", func(t *testing.T) {
		if s.srv.ReadHeaderTimeout <= 0 || s.srv.ReadTimeout <= 0 || s.srv.WriteTimeout < MaxSeconds*time.Second || s.srv.MaxHeaderBytes <= 0 {
			t.Errorf("debug listener's timeouts: read header %v, read %v, write %v, max header %d; want all set, write above %ds",
				s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.WriteTimeout, s.srv.MaxHeaderBytes, MaxSeconds)
		}
	})
}

func TestPanicAnswers500(t *testing.T) {
	recovery.AllowForTest(t)
	var logs bytes.Buffer
	h := recovering{log: slog.New(slog.NewTextHandler(&logs, nil)), next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	before := recovery.Total()
	code, _ := get(t, srv.URL+"/debug/pprof/")
	if code != http.StatusInternalServerError {
		t.Errorf("GET of a panicking handler = %d, want 500", code)
	}
	if got := recovery.Total() - before; got != 1 {
		t.Errorf("recovered panics = %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Errorf("log = %q, want the panic's value", logs.String())
	}
	// The server goes on answering.
	if code, _ := get(t, srv.URL+"/"); code != http.StatusInternalServerError {
		t.Errorf("second GET = %d, want 500 again (the server still serving)", code)
	}
}

func TestListenRefuses(t *testing.T) {
	t.Run("not loopback", func(t *testing.T) {
		for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
			s, err := Listen(addr, nil)
			if !errors.Is(err, ErrNotLoopback) {
				if s != nil {
					s.Shutdown(context.Background())
				}
				t.Errorf("Listen(%q) = %v, want ErrNotLoopback", addr, err)
			}
		}
	})
	t.Run("address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, err = Listen(ln.Addr().String(), nil)
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "debug_listen "+ln.Addr().String()) {
			t.Errorf("Listen(%s) in use = %v, want EADDRINUSE naming debug_listen and the address", ln.Addr(), err)
		}
	})
}

func TestShutdownEndsARunningProfile(t *testing.T) {
	s, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/debug/pprof/profile?seconds=60")
		if err == nil {
			resp.Body.Close()
		}
		started <- err
	}()
	// Wait until the profile runs.
	poll.Until(t, 10*time.Second, "the 60 s profile to start", func() bool {
		_, body := get(t, "http://"+s.Addr().String()+"/debug/pprof/goroutine?debug=1")
		return bytes.Contains(body, []byte("net/http/pprof.Profile"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	s.Shutdown(ctx)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Shutdown took %v with a 60 s profile running, want it cut short", d)
	}
	<-started
	s.Shutdown(context.Background()) // idempotent
}
