package server_test

import (
	"encoding/json"
	"errors"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestHostileAuditGateway: a token holder cannot flood the audit log with
// refused hellos nor write control characters into it, and the tunnel's
// master-token check accepts the token and nothing near it.
func TestHostileAuditGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, s *servertest.Server)
	}{
		{"guard/auth/master-token-near-misses-refused", func(t *testing.T, s *servertest.Server) {
			for _, tok := range []string{servertest.Token[:len(servertest.Token)-1], servertest.Token + "x", strings.ToUpper(servertest.Token), "apr_" + servertest.Token} {
				up, err := servertest.Hellos(t, s, tok, servertest.Announcing("near", servertest.AppHost), 1)
				var refused *tunnel.RefusedError
				if up != 0 || !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
					t.Errorf("tunnel with token %q: connected %d, err %v; want refused with 401", tok, up, err)
				}
			}
			if up, err := servertest.Hellos(t, s, servertest.Token, servertest.Announcing("exact", servertest.AppHost), 1); up != 1 {
				t.Errorf("tunnel with the master token: connected %d, err %v; want connected", up, err)
			}
		}},
		{"guard/audit/client-refused-flood", func(t *testing.T, s *servertest.Server) {
			code, body := servertest.AdminCall(t, servertest.NewVisitor(t, s), s, "POST", "/tokens", map[string]any{"name": "q", "hostnames": []string{"q.test"}})
			if code != http.StatusCreated {
				t.Fatalf("POST /aperio/api/tokens = %d %s, want 201", code, body)
			}
			var minted struct{ Token string }
			if err := json.Unmarshal([]byte(body), &minted); err != nil {
				t.Fatal(err)
			}
			const flood = 150 // well above the budget of 60, and few enough to end in time on a loaded machine
			up, err := servertest.Hellos(t, s, minted.Token, servertest.Announcing(strings.Repeat("spam", 60), "r.test"), flood)
			var refused *tunnel.RefusedError
			if up != 0 || !errors.As(err, &refused) {
				t.Fatalf("hellos out of the token's scope: connected %d, last err %v; want every one refused", up, err)
			}
			got := servertest.AuditEvents(t, s, "client_refused")
			if len(got) == 0 || len(got) > 60 {
				t.Errorf("%d refused hellos wrote %d client_refused entries, want 1 to 60 (the per-token budget of a minute)", flood, len(got))
			}
		}},
		{"guard/audit/control-characters-refused", func(t *testing.T, s *servertest.Server) {
			// The server answers the refusal and closes at once: a client
			// still writing its hello may see the close before the
			// answer, so try a few times to read the reason.
			var refused *tunnel.RefusedError
			for range 20 {
				up, err := servertest.Hellos(t, s, servertest.Token, servertest.Announcing("web\x1b[2J\n2031-01-01 token_revoked", servertest.AppHost), 1)
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
			for _, e := range servertest.AuditEvents(t, s, "client_refused") {
				if d, _ := e["detail"].(string); strings.ContainsAny(d, "\x1b\n") {
					t.Errorf("client_refused detail %q holds control characters", d)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := servertest.Config(t)
			cfg.Router.IPLimitMax = 0 // every hello comes from loopback: the per-IP bucket would refuse the flood before the audit budget is reached
			tt.run(t, servertest.Start(t, cfg, nil, nil))
		})
	}
}
