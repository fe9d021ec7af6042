package server_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server/servertest"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/passhash"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestEventsThroughServer triggers each event a server emits by itself
// through its real code path (a client attaching, refused and leaving, the
// token routes, the expiry check, the maintenance routes, a visitor
// refused by access control, a reload) and checks that each reaches a
// subscriber once, signed so that webhook.Verify accepts it. The scaling
// events go the same way in TestWebhooksThroughServer; quota_exceeded has
// no caller in this server yet (events.QuotaExceeded).
func TestEventsThroughServer(t *testing.T) {
	t.Parallel()
	secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("thirty-two bytes of a signing key"))
	rcv := &servertest.VerifiedReceiver{Secret: secret}
	hooks := httptest.NewServer(rcv)
	t.Cleanup(hooks.Close)

	hash, err := passhash.Hash("pw-events")
	if err != nil {
		t.Fatal(err)
	}
	svc := service(startBackend(t, identityEcho()).URL)
	svc.Auth = &config.Auth{Basic: &config.BasicAuth{Users: map[string]string{"ann": hash}}}
	cfg := serverConfig(t)
	cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true // a loopback http receiver
	srv := startServer(t, cfg, nil, nil)
	visitor := newVisitor(t, srv)
	if status, body := adminCall(t, visitor, srv, "POST", "/webhooks", map[string]any{
		"url": hooks.URL, "secret": secret, "events": apitype.WebhookEvents(),
	}); status != http.StatusCreated {
		t.Fatalf("POST /webhooks = %d %s, want 201", status, body)
	}

	ag := startAgent(t, srv, agentConfig(srv, svc)) // client_connected
	waitClients(t, visitor, srv, 1)

	soon := time.Now().Add(36 * time.Hour)
	status, body := adminCall(t, visitor, srv, "POST", "/tokens", map[string]any{"name": "ev", "hostnames": []string{"q.test"}, "expires_at": soon})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	srv.gw.WarnExpiringForTest(t.Context()) // token_expiring: within 7 days, not yet within 1: one warning
	// client_refused: the token announces a hostname it may not bind.
	if up, err := hellos(t, srv, tok.Token, announcing("outside", "r.test"), 1); up != 0 {
		t.Fatalf("hello out of the token's scope: connected %d, err %v; want refused", up, err)
	} else if _, ok := errors.AsType[*tunnel.RefusedError](err); !ok {
		t.Fatalf("hello out of the token's scope: err %v, want a refusal", err)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/tokens/" + tok.ID + "/rotate"}, // token_rotated
		{"DELETE", "/tokens/" + tok.ID},           // token_revoked
		{"PUT", "/maintenance/maint.test"},        // maintenance_on
		{"DELETE", "/maintenance/maint.test"},     // maintenance_off
	} {
		var b any
		if c.method != "DELETE" {
			b = map[string]any{}
		}
		if status, body := adminCall(t, visitor, srv, c.method, c.path, b); status >= 300 {
			t.Fatalf("%s %s = %d %s", c.method, c.path, status, body)
		}
	}
	for range 3 { // auth_denied, sampled: three refusals are one event
		if resp, _ := getWith(t, &stack{server: srv, visitor: visitor}, appHost, basicHeader("ann", "guess")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong password = %d, want 401", resp.StatusCode)
		}
	}
	srv.gw.AuditReload(t.Context(), "SIGHUP", []string{"log_level"}, nil, nil) // config_reloaded
	if err := ag.stop(); err != nil {                                          // client_disconnected
		t.Fatalf("agent stop = %v", err)
	}

	want := map[string]int{
		apitype.EventClientConnected: 1, apitype.EventClientDisconnected: 1, apitype.EventClientRefused: 1,
		apitype.EventTokenCreated: 1, apitype.EventTokenRotated: 1, apitype.EventTokenRevoked: 1, apitype.EventTokenExpiring: 1,
		apitype.EventMaintenanceOn: 1, apitype.EventMaintenanceOff: 1, apitype.EventAuthDenied: 1, apitype.EventConfigReloaded: 1,
		// A client stopped by its signal did not retire of its own accord.
		apitype.EventInstanceRetired: 0,
	}
	poll(t, waitFor, func() (bool, string) {
		for k, n := range want {
			if got := rcv.Count(k); got < n {
				return false, fmt.Sprintf("%d verified %s deliveries, want %d", got, k, n)
			}
		}
		return true, ""
	})
	counts, refused := rcv.Verified()
	if len(refused) > 0 {
		t.Errorf("deliveries Verify refused: %q", refused)
	}
	for k, n := range want {
		if got := counts[k]; got != n {
			t.Errorf("%d %s deliveries, want %d", got, k, n)
		}
	}
	for k := range counts {
		if !slices.Contains(apitype.WebhookEvents(), k) {
			t.Errorf("delivered %q, which no subscription can name", k)
		}
	}
}
