package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
)

// adminCallWith is adminCall with cred as the bearer credential.
func adminCallWith(t testing.TB, s *testServer, cred, method, path string, body any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req := newRequest(t, t.Context(), s, method, "admin.localhost", "/aperio/api"+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Content-Type", "application/json")
	resp, out := do(t, newVisitor(t, s), req)
	return resp.StatusCode, out
}

// coldStartHook is a provider whose first call for each hostname starts a
// client for it on the server it names, and records every call's body.
type coldStartHook struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
}

// newColdStartHook starts a provider; start(host) starts the client of a
// cold started host, once per host.
func newColdStartHook(t *testing.T, start func(host string)) *coldStartHook {
	h := &coldStartHook{}
	started := map[string]bool{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		h.mu.Lock()
		h.bodies = append(h.bodies, body)
		host, _ := body["hostname"].(string)
		first := !started[host]
		started[host] = true
		h.mu.Unlock()
		if first {
			start(host)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.Close)
	return h
}

// calls returns the bodies of the calls so far.
func (h *coldStartHook) calls() []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]any(nil), h.bodies...)
}

// TestColdStartFromAPIRecord: a record armed through POST
// /aperio/api/scaling by an admin key, with no client ever connected for
// the hostname, makes every server sharing the store hold a visitor of it
// and call the provider (reason cold_start); the client the provider
// starts serves the held request. The server that answered the API holds
// the very next visitor; another server arms the record through the
// change feed.
func TestColdStartFromAPIRecord(t *testing.T) {
	t.Parallel()
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			backend := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %s", r.Host, r.URL.Path)
			}))
			cfg := serverConfig(t)
			cfg.ScalingEnabled = true
			cfg.Outbound.AllowHTTP = true    // the test provider is plain http…
			cfg.Outbound.AllowPrivate = true // …on loopback
			a := startServerOn(t, cfg, open(t))
			b := startServerOn(t, cfg, open(t))
			// The provider starts the client on the server that was
			// visited: hosts on a.test visit A, hosts on b.test B.
			hook := newColdStartHook(t, func(host string) {
				s := map[string]*testServer{"one.a.test": a, "two.b.test": b}[host]
				svc := config.Service{Target: backend.URL, Hostnames: []string{host}}
				startAgent(t, s, agentConfig(s, svc))
			})

			code, body := adminCall(t, newVisitor(t, a), a, "POST", "/admin-keys", map[string]string{"name": "ops", "role": "admin"})
			if code != http.StatusCreated {
				t.Fatalf("POST /admin-keys = %d %s", code, body)
			}
			var key struct {
				ID     string `json:"id"`
				Secret string `json:"key"`
			}
			if err := json.Unmarshal([]byte(body), &key); err != nil || key.Secret == "" {
				t.Fatalf("POST /admin-keys = %s (%v), want a key", body, err)
			}
			arm := func(host string) {
				t.Helper()
				code, body := adminCallWith(t, a, key.Secret, "POST", "/scaling", map[string]any{
					"hostname": host, "url": hook.URL + "/scale", "secret": "provider-secret", "max": 2, "cold_start": "30s",
				})
				if code != http.StatusCreated {
					t.Fatalf("POST /scaling for %s on A = %d %s, want 201", host, code, body)
				}
			}
			visit := func(s *testServer, host string) {
				t.Helper()
				start := time.Now()
				code, body := get(t, newVisitor(t, s), s, host, "/hello")
				if code != http.StatusOK || body != host+" /hello" {
					t.Fatalf("GET %s/hello = %d %q, want 200 from the cold started client", host, code, body)
				}
				t.Logf("%s: held and served %v after the request", host, time.Since(start).Round(time.Millisecond))
			}

			// On the server that answered: armed before the answer, so
			// the very next visitor is held.
			arm("one.a.test")
			if !a.gw.ArmedForTest("one.a.test", "") {
				t.Fatal("server A's router does not arm one.a.test when POST /scaling answers")
			}
			visit(a, "one.a.test")

			// On another server: armed through the change feed.
			arm("two.b.test")
			poll(t, 10*time.Second, func() (bool, string) {
				return b.gw.ArmedForTest("two.b.test", ""), "server B's router does not arm two.b.test"
			})
			visit(b, "two.b.test")

			calls := hook.calls()
			if len(calls) != 2 {
				t.Fatalf("provider calls = %v, want one cold start per hostname", calls)
			}
			for i, host := range []string{"one.a.test", "two.b.test"} {
				if c := calls[i]; c["reason"] != "cold_start" || c["hostname"] != host || c["current"] != 0.0 || c["desired"] != 1.0 {
					t.Errorf("provider call %d = %v, want a cold_start of %s from 0 to 1", i, c, host)
				}
			}
		})
	}
}
