package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// nopForwarder answers nothing: the hostile tunnels never get a request.
type nopForwarder struct{}

func (nopForwarder) Forward(context.Context, string, *http.Request) (*http.Response, error) {
	return nil, errors.New("no backend")
}

// announcing returns an announcement of one service on hostname, from a
// client called name.
func announcing(name, hostname string) func() tunnel.Announcement {
	return func() tunnel.Announcement {
		return tunnel.Announcement{Name: name, InstanceID: "i-1",
			Services: []tunnel.Service{{ID: "0", Hostnames: []string{hostname}, Healthy: true}}}
	}
}

// hellos dials s with token and announce, reconnecting at once after each
// refusal, until n sessions ended; it returns how many connected and the
// last error a session ended with.
func hellos(t *testing.T, s *testServer, token string, announce func() tunnel.Announcement, n int64) (connected int64, last error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	var (
		ended, up atomic.Int64
		mu        sync.Mutex // guards lastErr
		lastErr   error
	)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.url, Token: token, Announce: announce, Forwarder: nopForwarder{},
		Logger: testLogger(),
		Jitter: func() float64 { return 0 }, // no backoff: a client hammering the server
		OnConnect: func(string) {
			up.Add(1)
			cancel()
		},
		OnDisconnect: func(err error) {
			if err != nil {
				mu.Lock()
				lastErr = err
				mu.Unlock()
			}
			if ended.Add(1) >= n {
				cancel()
			}
		},
	})
	if err != nil {
		t.Fatalf("tunnel.NewClient() = %v", err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Client.Run() = %v", err)
	}
	if ctx.Err() == context.DeadlineExceeded && up.Load() == 0 {
		t.Fatalf("%d of %d sessions ended within %s", ended.Load(), n, waitFor)
	}
	mu.Lock()
	defer mu.Unlock()
	return up.Load(), lastErr
}

// TestHostileAuditGateway: a token holder cannot flood the audit log with
// refused hellos nor write control characters into it, and the tunnel's
// master-token check accepts the token and nothing near it.
func TestHostileAuditGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *testServer)
	}{
		{"guard/auth/master-token-near-misses-refused", func(t *testing.T, s *testServer) {
			for _, tok := range []string{testToken[:len(testToken)-1], testToken + "x", strings.ToUpper(testToken), "apr_" + testToken} {
				up, err := hellos(t, s, tok, announcing("near", appHost), 1)
				var refused *tunnel.RefusedError
				if up != 0 || !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
					t.Errorf("tunnel with token %q: connected %d, err %v; want refused with 401", tok, up, err)
				}
			}
			if up, err := hellos(t, s, testToken, announcing("exact", appHost), 1); up != 1 {
				t.Errorf("tunnel with the master token: connected %d, err %v; want connected", up, err)
			}
		}},
		{"guard/audit/client-refused-flood", func(t *testing.T, s *testServer) {
			code, body := adminCall(t, newVisitor(t, s), s, "POST", "/tokens", map[string]any{"name": "q", "hostnames": []string{"q.test"}})
			if code != http.StatusCreated {
				t.Fatalf("POST /aperio/api/tokens = %d %s, want 201", code, body)
			}
			var minted struct{ Token string }
			if err := json.Unmarshal([]byte(body), &minted); err != nil {
				t.Fatal(err)
			}
			const flood = 150 // well above the budget of 60, and few enough to end in time on a loaded machine
			up, err := hellos(t, s, minted.Token, announcing(strings.Repeat("spam", 60), "r.test"), flood)
			var refused *tunnel.RefusedError
			if up != 0 || !errors.As(err, &refused) {
				t.Fatalf("hellos out of the token's scope: connected %d, last err %v; want every one refused", up, err)
			}
			got := auditEvents(t, s, "client_refused")
			if len(got) == 0 || len(got) > 60 {
				t.Errorf("%d refused hellos wrote %d client_refused entries, want 1 to 60 (the per-token budget of a minute)", flood, len(got))
			}
		}},
		{"guard/audit/control-characters-refused", func(t *testing.T, s *testServer) {
			// The server answers the refusal and closes at once: a client
			// still writing its hello may see the close before the
			// answer, so try a few times to read the reason.
			var refused *tunnel.RefusedError
			for range 20 {
				up, err := hellos(t, s, testToken, announcing("web\x1b[2J\n2031-01-01 token_revoked", appHost), 1)
				if up != 0 {
					t.Fatalf("hello with control characters in its name connected, want it refused")
				}
				if errors.As(err, &refused) {
					break
				}
			}
			if refused == nil || !strings.Contains(refused.Reason, "not printable") {
				t.Fatalf("hello with control characters in its name: refusal %v; want refused as not printable", refused)
			}
			for _, e := range auditEvents(t, s, "client_refused") {
				if d, _ := e["detail"].(string); strings.ContainsAny(d, "\x1b\n") {
					t.Errorf("client_refused detail %q holds control characters", d)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := serverConfig(t)
			cfg.Router.IPLimitMax = 0 // every hello comes from loopback: the per-IP bucket would refuse the flood before the audit budget is reached
			tt.run(t, startServer(t, cfg, nil, nil))
		})
	}
}
