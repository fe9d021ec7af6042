package server_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestExpiredTokenReleasesScalingRecords: a record armed only by a token
// goes when the token expires, as on revocation, not after
// scaling_record_ttl.
func TestExpiredTokenReleasesScalingRecords(t *testing.T) {
	t.Parallel()
	hook := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	cfg.Router.IPLimitMax = 0 // the test polls the admin API faster than a visitor's bucket refills
	srv := servertest.Start(t, cfg, nil, nil)
	visitor := servertest.NewVisitor(t, srv)

	expires := time.Now().Add(4 * time.Second).UTC()
	status, body := servertest.AdminCall(t, visitor, srv, "POST", "/tokens", map[string]any{
		"name": "short", "hostnames": []string{servertest.AppHost}, "expires_at": expires.Format(time.RFC3339Nano),
	})
	if status != http.StatusCreated {
		t.Fatalf("POST /tokens = %d %s, want 201", status, body)
	}
	var tok struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	ac := servertest.AgentConfig(srv, servertest.Service(servertest.Backend(t, http.NotFoundHandler()).URL))
	ac.Token = tok.Token
	ac.Scaling = &config.Scaling{URL: hook.URL, Max: 1, ColdStart: time.Minute,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Minute}
	servertest.StartAgent(t, srv, ac)

	type record struct {
		ID string `json:"id"`
	}
	records := func() []record {
		status, body := servertest.AdminCall(t, visitor, srv, "GET", "/scaling", nil)
		if status != http.StatusOK {
			t.Fatalf("GET /scaling = %d %s", status, body)
		}
		var rs []record
		if err := json.Unmarshal([]byte(body), &rs); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		return len(records()) == 1, "want the record the token's client declared"
	})
	if time.Now().After(expires) {
		t.Fatalf("the client declared its record after the token expired: the test's margin is too small")
	}
	// The TTL is 30 days: only the expiry can remove the record now.
	servertest.Poll(t, time.Until(expires)+10*time.Second, func() (bool, string) {
		rs := records()
		return len(rs) == 0, "scaling records after the token expired: want none"
	})
	t.Logf("record released %v after the token expired", time.Since(expires).Round(time.Millisecond))
}
