package server_test

import (
	"context"
	"encoding/json"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestBindRefusedAudit: a session with one bind its token allows and one
// it does not attaches, and writes a client_bind_refused entry naming the
// refused one; reconnecting as fast as it can (a flapping client) writes
// no more than the per-token budget of 60 a minute.
func TestBindRefusedAudit(t *testing.T) {
	t.Parallel()
	cfg := servertest.Config(t)
	cfg.Router.IPLimitMax = 0 // every session comes from loopback
	s := servertest.Start(t, cfg, nil, nil)
	code, body := servertest.AdminCall(t, servertest.NewVisitor(t, s), s, "POST", "/tokens", map[string]any{"name": "q", "hostnames": []string{"q.test"}})
	if code != http.StatusCreated {
		t.Fatalf("POST /aperio/api/tokens = %d %s, want 201", code, body)
	}
	var minted struct{ Token string }
	if err := json.Unmarshal([]byte(body), &minted); err != nil {
		t.Fatal(err)
	}
	announce := func() tunnel.Announcement {
		return tunnel.Announcement{Name: "flap", InstanceID: "i-1",
			Services: []tunnel.Service{{ID: "0", Hostnames: []string{"q.test", "evil.test"}, Healthy: true}}}
	}
	const sessions = 90 // above the budget of 60
	for i := range sessions {
		ctx, cancel := context.WithTimeout(t.Context(), servertest.WaitFor)
		connected := false
		c, err := tunnel.NewClient(tunnel.ClientConfig{
			URL: s.URL, Token: minted.Token, Announce: announce, Forwarder: servertest.NopForwarder{},
			Logger: servertest.Logger(),
			Jitter: func() float64 { return 0 },
			OnConnect: func(string) {
				connected = true
				cancel()
			},
		})
		if err != nil {
			cancel()
			t.Fatalf("tunnel.NewClient() = %v", err)
		}
		err = c.Run(ctx)
		cancel()
		if err != nil || !connected {
			t.Fatalf("session %d: Run() = %v, connected %v; want connected with its allowed bind", i, err, connected)
		}
	}
	got := servertest.AuditEvents(t, s, "client_bind_refused")
	if len(got) == 0 || len(got) > 60 {
		t.Fatalf("%d sessions with a refused bind wrote %d client_bind_refused entries, want 1 to 60", sessions, len(got))
	}
	if d, _ := got[len(got)-1]["detail"].(string); !strings.Contains(d, "evil.test") || strings.Contains(d, "q.test") {
		t.Errorf("client_bind_refused detail = %q, want it to name evil.test only", d)
	}
}
