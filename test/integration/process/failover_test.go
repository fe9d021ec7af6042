package process_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/procs"
)

// TestProcessesFailoverOnSIGKILL runs the real binaries: a server with
// failover "retry" and two clients serving one hostname. The client
// serving a request is SIGKILLed while its backend holds the request: a
// GET is answered by the other client; a POST whose body already went out
// is sent again, body and all, only with failover_all_methods and a body
// within failover_replay_max_body (kept for replay); otherwise the visitor
// gets 502.
func TestProcessesFailoverOnSIGKILL(t *testing.T) {
	t.Parallel()
	bin := procs.Binaries(t)

	tests := []struct {
		name   string
		env    []string // server settings beyond the defaults
		method string
		body   string
		want   int
	}{
		{name: "GET goes to the other client", env: []string{"APERIO_FAILOVER=retry"}, method: http.MethodGet, want: http.StatusOK},
		{name: "POST with a body is not re-sent", env: []string{"APERIO_FAILOVER=retry"}, method: http.MethodPost, body: "order=1", want: http.StatusBadGateway},
		{
			name:   "POST with a body is replayed with failover_all_methods",
			env:    []string{"APERIO_FAILOVER=retry", "APERIO_FAILOVER_ALL_METHODS=1"},
			method: http.MethodPost, body: "order=1", want: http.StatusOK,
		},
		{
			name:   "POST with a body beyond failover_replay_max_body is not re-sent",
			env:    []string{"APERIO_FAILOVER=retry", "APERIO_FAILOVER_ALL_METHODS=1", "APERIO_FAILOVER_REPLAY_MAX_BODY=4"},
			method: http.MethodPost, body: "order=1", want: http.StatusBadGateway,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const host = "failover.test"
			// Client a's backend holds /hold until the request goes away (its
			// client dies); client b's answers everything at once.
			entered := make(chan string, 1) // method and body of what reached a
			a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return
				}
				if r.URL.Path == "/hold" {
					select {
					case entered <- r.Method + " " + string(body):
					case <-r.Context().Done():
						return
					}
					select {
					case <-r.Context().Done():
					case <-t.Context().Done():
					}
					return
				}
				io.WriteString(w, "a")
			}))
			t.Cleanup(a.Close)
			var (
				bMu   sync.Mutex        // guards the following fields
				bSeen []string          // method and path of every request that reached b
				bBody map[string]string // the last body b read, by method and path
			)
			bBody = map[string]string{}
			b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Counted on arrival: a re-sent request whose body is gone
				// is a re-send too.
				bMu.Lock()
				bSeen = append(bSeen, r.Method+" "+r.URL.Path)
				bMu.Unlock()
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return
				}
				bMu.Lock()
				bBody[r.Method+" "+r.URL.Path] = string(body)
				bMu.Unlock()
				io.WriteString(w, "b")
			}))
			t.Cleanup(b.Close)
			bGot := func(what string) int {
				bMu.Lock()
				defer bMu.Unlock()
				n := 0
				for _, s := range bSeen {
					if s == what {
						n++
					}
				}
				return n
			}

			server := startServer(t, bin, append([]string{"APERIO_SERVER_TOKEN=proc-token-0123456789", "APERIO_LOG_LEVEL=debug"}, tc.env...)...)
			serverLog, base := server.log, server.url
			clients := map[string]*exec.Cmd{}
			for _, c := range []struct {
				name    string
				backend *httptest.Server
			}{{"a", a}, {"b", b}} {
				cmd := exec.Command(filepath.Join(bin, "aperio-client"), strings.TrimPrefix(c.backend.URL, "http://"),
					"--hostname", host, "--name", c.name, "--server-url", base, "--server-token", "proc-token-0123456789")
				cmd.Dir = t.TempDir()
				cmd.Env = append(os.Environ(), "HOME="+cmd.Dir)
				startAndFind(t, cmd, regexp.MustCompile(`msg="tunnel connected"`))
				clients[c.name] = cmd
			}

			tr := &http.Transport{Proxy: nil}
			t.Cleanup(tr.CloseIdleConnections)
			visitor := &http.Client{Transport: tr, Timeout: time.Minute}
			do := func(method, path, body string) (int, string, error) {
				req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
				if err != nil {
					return 0, "", err
				}
				req.Host = host
				resp, err := visitor.Do(req)
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				rb, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(rb), err
			}
			waitFor(t, "both clients are connected", func() bool {
				code, body, err := do(http.MethodGet, "/aperio/health", "")
				var h struct {
					ConnectedClients int `json:"connected_clients"`
				}
				return err == nil && code == http.StatusOK && json.Unmarshal([]byte(body), &h) == nil && h.ConnectedClients == 2
			})

			// Round-robin: a request that b answers at once is followed by
			// one for a; send until one is held at a's backend.
			type result struct {
				code int
				body string
				err  error
			}
			var held chan result
			before := 0 // how often the method on /hold had reached b when a held it
			for attempt := 0; held == nil; attempt++ {
				if attempt == 4 {
					t.Fatalf("%s /hold: %d attempts, none reached client a", tc.method, attempt)
				}
				before = bGot(tc.method + " /hold")
				ch := make(chan result, 1)
				go func() {
					code, body, err := do(tc.method, "/hold", tc.body)
					ch <- result{code, body, err}
				}()
				timer := time.NewTimer(20 * time.Second)
				select {
				case got := <-entered:
					if want := tc.method + " " + tc.body; got != want {
						t.Fatalf("client a's backend got %q, want %q", got, want)
					}
					held = ch
				case r := <-ch:
					if r.err != nil || r.code != http.StatusOK || r.body != "b" {
						t.Fatalf("%s /hold before any failure = %d %q, %v, want 200 %q", tc.method, r.code, r.body, r.err, "b")
					}
				case <-timer.C:
					t.Fatalf("%s /hold: neither held at a nor answered within 20s", tc.method)
				}
				timer.Stop()
			}

			if err := clients["a"].Process.Kill(); err != nil {
				t.Fatalf("SIGKILL client a: %v", err)
			}
			waitExit(t, clients["a"])
			timer := time.NewTimer(30 * time.Second)
			defer timer.Stop()
			var r result
			select {
			case r = <-held:
			case <-timer.C:
				t.Fatalf("%s /hold: no answer within 30s of client a's death", tc.method)
			}
			if r.err != nil || r.code != tc.want {
				t.Fatalf("%s /hold whose client was SIGKILLed = %d %q, %v, want %d", tc.method, r.code, r.body, r.err, tc.want)
			}
			// The router's own account: it fails over before it gives up.
			wantB := before
			failedOver := serverLog.wait(t, regexp.MustCompile(`msg="(failing over|client went away mid-request)"`))
			if tc.want == http.StatusOK {
				if r.body != "b" {
					t.Errorf("%s /hold after failover answered %q, want %q (client b)", tc.method, r.body, "b")
				}
				if failedOver != "failing over" {
					t.Errorf("server logged %q for the %s, want %q first", failedOver, tc.method, "failing over")
				}
				bMu.Lock()
				got := bBody[tc.method+" /hold"]
				bMu.Unlock()
				if got != tc.body {
					t.Errorf("%s /hold re-sent to client b with body %q, want %q", tc.method, got, tc.body)
				}
				wantB = before + 1
			} else if failedOver != "client went away mid-request" {
				t.Errorf("server logged %q for the POST, want %q and no re-dispatch before it", failedOver, "client went away mid-request")
			}
			if got := bGot(tc.method + " /hold"); got != wantB {
				t.Errorf("%s /hold reached client b's backend %d times, want %d", tc.method, got, wantB)
			}
			// The survivor keeps serving.
			if code, body, err := do(http.MethodGet, "/after", ""); err != nil || code != http.StatusOK || body != "b" {
				t.Errorf("GET /after client a died = %d %q, %v, want 200 %q", code, body, err, "b")
			}
		})
	}
}
