package process_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/agent"
	"github.com/aperio-dev/aperio/internal/testkit/blackhole"
)

// TestProcessesBackendResilience runs the real binaries through what a
// client does when its backend is slow, absent or failing its probe:
// timeout, connect_timeout, retry (idempotent methods only unless
// all_methods) and health.success. One server serves every subtest, each
// with clients of its own on hostnames of its own.
func TestProcessesBackendResilience(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "resilience-master-token-0123456789abcdef")
	base := f.startServer(t).url
	type answer struct {
		code int
		body string
		took time.Duration
	}
	// send sends method host/path (a POST with a body) and reports the
	// answer; on a transport error, code 0 and the error's text. It may
	// run on a goroutine of its own.
	send := func(t *testing.T, method, host, path string) answer {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("order=1")
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, body)
		if err != nil {
			return answer{body: err.Error()}
		}
		req.Host = host
		start := time.Now()
		resp, err := f.http.Do(req)
		if err != nil {
			return answer{body: err.Error(), took: time.Since(start)}
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return answer{body: err.Error(), took: time.Since(start)}
		}
		return answer{resp.StatusCode, string(b), time.Since(start)}
	}

	t.Run("timeout", func(t *testing.T) {
		const (
			host    = "timeout.test"
			timeout = 500 * time.Millisecond
			slow    = 10 * time.Second // the delay of /slow
			quick   = 100 * time.Millisecond
		)
		b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := quick
			if r.URL.Path == "/slow" {
				d = slow
			}
			tm := time.NewTimer(d)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-r.Context().Done(): // the client gave up on it
				return
			}
			io.WriteString(w, "answered "+r.URL.Path)
		}))
		t.Cleanup(b.Close)
		f.startClient(t, base, "timed", fmt.Sprintf("  - target: %s\n    hostname: %s\n    timeout: %s\n", b.URL, host, timeout))
		f.waitHealthy(t, base, map[string]string{"timed": host})

		if a := send(t, http.MethodGet, host, "/quick"); a.code != http.StatusOK || a.body != "answered /quick" {
			t.Errorf("GET /quick (answered after %v, timeout %v) = %d %q, want 200 %q", quick, timeout, a.code, a.body, "answered /quick")
		}
		a := send(t, http.MethodGet, host, "/slow")
		if a.code != http.StatusBadGateway {
			t.Errorf("GET /slow (answered after %v, timeout %v) = %d %q, want 502", slow, timeout, a.code, a.body)
		}
		if a.took < timeout || a.took > slow/2 {
			t.Errorf("GET /slow answered after %v, want between the timeout %v and %v (well before the backend's %v)", a.took, timeout, slow/2, slow)
		}
	})

	t.Run("connect_timeout", func(t *testing.T) {
		const (
			host    = "stalled.test"
			connect = 300 * time.Millisecond
		)
		// The backend never completes the TCP handshake: only
		// connect_timeout ends the dial before the 10 s default.
		f.startClient(t, base, "stalled", fmt.Sprintf("  - target: http://%s\n    hostname: %s\n    connect_timeout: %s\n", blackhole.Addr(t), host, connect))
		f.waitHealthy(t, base, map[string]string{"stalled": host})

		a := send(t, http.MethodGet, host, "/")
		if a.code != http.StatusBadGateway {
			t.Errorf("GET of a backend that never accepts = %d %q, want 502", a.code, a.body)
		}
		if a.took < connect || a.took > 5*time.Second {
			t.Errorf("GET of a backend that never accepts answered after %v, want between connect_timeout %v and 5s (the default is 10s)", a.took, connect)
		}
	})

	t.Run("retry", func(t *testing.T) {
		const backoff = 500 * time.Millisecond
		// Dials are refused until the backend takes the port below.
		addr := refusedAddr(t)
		// Six tries 500ms apart: a 2.5 s window in which the backend
		// starts. One client a service, each with a status socket of its
		// own: its in-flight count says when its request has arrived.
		retry := fmt.Sprintf("{attempts: 6, backoff: %s", backoff)
		sockets := map[string]string{}
		for _, c := range []struct{ name, retry string }{
			{"get", retry + "}"}, {"post", retry + "}"}, {"all", retry + ", all_methods: true}"},
		} {
			sockets[c.name] = filepath.Join(t.TempDir(), "status.sock")
			f.startClient(t, base, c.name, fmt.Sprintf("  - target: http://%s\n    hostname: %s.retry.test\n    retry: %s\nstatus_socket: %s\n",
				addr, c.name, c.retry, sockets[c.name]))
		}
		f.waitHealthy(t, base, map[string]string{"get": "get.retry.test", "post": "post.retry.test", "all": "all.retry.test"})

		var mu sync.Mutex
		seen := map[string]string{} // "METHOD host" → the body the backend read
		backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("backend: reading the body of %s %s: %v", r.Method, r.Host, err)
			}
			mu.Lock()
			seen[r.Method+" "+r.Host] = string(b)
			mu.Unlock()
			io.WriteString(w, r.Method+" "+r.Host)
		}))

		type sent struct {
			method, host string
			got          chan answer
		}
		reqs := []sent{{http.MethodGet, "get.retry.test", nil}, {http.MethodPost, "post.retry.test", nil}, {http.MethodPost, "all.retry.test", nil}}
		for i := range reqs {
			reqs[i].got = make(chan answer, 1)
			go func(r sent) { r.got <- send(t, r.method, r.host, "/") }(reqs[i])
		}
		// The two that may be retried have reached their clients, which
		// dial at once (and are refused), before the backend starts: the
		// count goes up just before Forward.
		waitFor(t, "the GET and the all_methods POST are in flight at their clients", func() bool {
			for _, name := range []string{"get", "all"} {
				st, err := agent.ReadStatus(t.Context(), sockets[name])
				if err != nil {
					t.Fatalf("status of client %s: %v", name, err)
				}
				if st.InFlight == 0 {
					return false
				}
			}
			return true
		})
		// The POST that may not be retried has had its answer (its one
		// dial refused) before the backend starts: started any sooner, the
		// backend would take it on the first try.
		var postAnswer answer
		select {
		case postAnswer = <-reqs[1].got:
		case <-time.After(10 * time.Second):
			t.Fatal("POST post.retry.test got no answer in 10 s while its backend was down")
		}
		reqs[1].got <- postAnswer
		var err error
		backend.Listener, err = net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s again: %v", addr, err)
		}
		backend.Start()
		t.Cleanup(backend.Close)

		want := map[string]struct {
			code int
			body string
		}{
			"get.retry.test":  {http.StatusOK, "GET get.retry.test"},
			"post.retry.test": {http.StatusBadGateway, ""}, // not retried: refused once, answered 502
			"all.retry.test":  {http.StatusOK, "POST all.retry.test"},
		}
		for _, r := range reqs {
			a := <-r.got
			w := want[r.host]
			if a.code != w.code || (w.body != "" && a.body != w.body) {
				t.Errorf("%s %s while its backend starts = %d %q, want %d %q", r.method, r.host, a.code, a.body, w.code, w.body)
			}
			if w.code == http.StatusOK && a.took < backoff {
				t.Errorf("%s %s answered after %v, want at least the backoff %v (its first try refused)", r.method, r.host, a.took, backoff)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen["POST post.retry.test"]; ok {
			t.Errorf("the backend saw the POST of post.retry.test, want it never sent again (no all_methods)")
		}
		if got := seen["POST all.retry.test"]; got != "order=1" {
			t.Errorf("the backend read the retried POST's body %q, want %q", got, "order=1")
		}
	})

	t.Run("health_success", func(t *testing.T) {
		const host = "health.test"
		var status atomic.Int32 // what /healthz answers
		status.Store(http.StatusFound)
		backend := func(name string) string {
			b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" {
					w.WriteHeader(int(status.Load()))
					return
				}
				io.WriteString(w, name)
			}))
			t.Cleanup(b.Close)
			return b.URL
		}
		const probe = "health: {endpoint: /healthz, interval: 100ms, threshold: 1"
		// strict takes the default success, 2xx; lenient 2xx-3xx.
		f.startClient(t, base, "strict", "  - target: "+backend("strict")+"\n    hostname: "+host+"\n    "+probe+"}\n")
		f.startClient(t, base, "lenient", "  - target: "+backend("lenient")+"\n    hostname: "+host+"\n    "+probe+", success: 2xx-3xx}\n")
		healthIs := func(want map[string]bool) func() bool {
			return func() bool {
				list := f.clients(t, base)
				for name, h := range want {
					if c, ok := clientEntry(list, name, host); !ok || c.Healthy != h {
						return false
					}
				}
				return true
			}
		}
		waitFor(t, "GET /aperio/api/clients lists strict unhealthy, lenient healthy while /healthz answers 302", healthIs(map[string]bool{"strict": false, "lenient": true}))
		for i := range 10 {
			if a := send(t, http.MethodGet, host, "/"); a.code != http.StatusOK || a.body != "lenient" {
				t.Fatalf("GET %d while strict's probe fails = %d %q, want 200 lenient", i, a.code, a.body)
			}
		}

		status.Store(http.StatusNoContent)
		waitFor(t, "GET /aperio/api/clients lists both healthy once /healthz answers 204", healthIs(map[string]bool{"strict": true, "lenient": true}))
		served := map[string]int{}
		for range 10 {
			a := send(t, http.MethodGet, host, "/")
			if a.code != http.StatusOK {
				t.Fatalf("GET once both pass = %d %q, want 200", a.code, a.body)
			}
			served[a.body]++
		}
		if served["strict"] == 0 || served["lenient"] == 0 {
			t.Errorf("10 GETs once both probes pass answered by %v, want both clients", served)
		}
	})
}
