package admin_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/router"
)

// explainFixture serves the API with a real router as its Explainer: org a
// armed a scaling record for cold.example.com (so its bind is a's), and
// org a's key minted a token for *.a.example.com.
func explainFixture(t *testing.T) (f *fixture, keyA, keyB admin.MintedKey) {
	t.Helper()
	f = newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	keyA, keyB = f.key(t, a, admin.RoleViewer), f.key(t, b, admin.RoleViewer)
	adminA := f.key(t, a, admin.RoleAdmin)
	f.own(t, a, "*.a.example.com")
	f.token(t, adminA.Secret, "*.a.example.com")
	rt, err := router.New(router.Config{GatewayTimeout: time.Second, Fallbacks: []router.Fallback{{Hostname: "gone.example.com", URL: "https://status.example.com/"}}})
	if err != nil {
		t.Fatal(err)
	}
	rt.Registry().SetArmed([]router.ArmedBind{{OrgID: a, Pattern: "cold.example.com", ColdStart: time.Minute}})
	rt.Registry().SetMaintenance([]router.Maintenance{{Hostname: "web.a.example.com"}})
	g := *f
	g.url = g.serve(t, admin.Config{Explainer: rt})
	return &g, keyA, keyB
}

func explainPath(host, path, ip string) string {
	return "/explain?" + url.Values{"host": {host}, "path": {path}, "ip": {ip}}.Encode()
}

func TestExplainEndpoint(t *testing.T) {
	f, keyA, keyB := explainFixture(t)
	tests := []struct {
		name, cred, host, path, ip string
		status                     int
		verdict                    string // for 200
		errMsg                     string // otherwise
	}{
		{"master, unknown host", masterToken, "nope.example.com", "/", "", 200, "502 no client", ""},
		{"master, fallback", masterToken, "gone.example.com", "/x", "203.0.113.7", 200, "302 fallback redirect to https://status.example.com/", ""},
		{"owner of the armed bind", keyA.Secret, "cold.example.com", "/", "", 200, "wait for a client behind 0", ""}, // armed, but no scaler on this router: the usual wait
		{"owner by token, maintenance", keyA.Secret, "web.a.example.com", "/", "", 200, "503 maintenance (Retry-After: 300)", ""},
		{"owner by token, nothing bound", keyA.Secret, "api.a.example.com", "/", "", 200, "502 no client", ""},
		{"another org's armed bind", keyB.Secret, "cold.example.com", "/", "", 404, "", "not found in your organization"},
		{"another org's token hostname", keyB.Secret, "web.a.example.com", "/", "", 404, "", "not found in your organization"},
		{"no host", masterToken, "", "/", "", 400, "", "host is required"},
		{"wildcard host", masterToken, "*.a.example.com", "/", "", 400, "", "not a hostname"},
		{"bad path", masterToken, "x.example.com", "nope", "", 400, "", "must start with /"},
		{"bad ip", masterToken, "x.example.com", "/", "1.2.3", 400, "", "not an IP address"},
		{"no credentials", "", "x.example.com", "/", "", 401, "", "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := explainPath(tt.host, tt.path, tt.ip)
			if tt.status != http.StatusOK {
				f.expectError(t, "GET", p, tt.cred, "", tt.status, tt.errMsg)
				return
			}
			var ex router.Explanation
			f.expect(t, "GET", p, tt.cred, "", http.StatusOK, &ex)
			if ex.Verdict != tt.verdict || len(ex.Steps) == 0 {
				t.Errorf("GET %s verdict = %q with %d steps, want %q", p, ex.Verdict, len(ex.Steps), tt.verdict)
			}
		})
	}
}

// TestExplainWithoutRouter: a server without an Explainer says so.
func TestExplainWithoutRouter(t *testing.T) {
	f := newFixture(t)
	f.expectError(t, "GET", explainPath("x.example.com", "/", ""), masterToken, "", http.StatusNotFound, "not available")
}

// TestExplainRedactsOtherOrgs: a key sees its own clients of a shared bind
// by name, another organization's as "(another organization)", also in the
// verdict and the permit step.
func TestExplainRedactsOtherOrgs(t *testing.T) {
	ex := router.Explanation{
		Bind:   "shared.example.com",
		OrgIDs: []string{"org_a", "org_b"},
		Clients: []router.ExplainClient{
			{ID: "conn_a", Name: "web-a", OrgID: "org_a"},
			{ID: "conn_b", Name: "web-b", OrgID: "org_b", Candidate: true, Admits: true, Free: true},
		},
		Steps:   []router.ExplainStep{{Name: router.StepPermit, Outcome: router.OutcomePass, Detail: "client web-b has a free permit (0 of 2 in flight)"}},
		Verdict: "dispatch to client web-b (conn_b)",
	}
	got := admin.RedactForTest(ex, "org_a")
	if got.Clients[0].Name != "web-a" || got.Clients[1].Name != "(another organization)" || got.Clients[1].ID != "(another organization)" || got.Clients[1].OrgID != "" {
		t.Errorf("redacted clients = %+v, want org_b's hidden and org_a's shown", got.Clients)
	}
	if got.Verdict != "dispatch to a client of (another organization)" {
		t.Errorf("redacted verdict = %q", got.Verdict)
	}
	if d := got.Steps[0].Detail; d != "client (another organization) has a free permit (0 of 2 in flight)" {
		t.Errorf("redacted permit step = %q", d)
	}
	if len(got.OrgIDs) != 1 || got.OrgIDs[0] != "org_a" {
		t.Errorf("redacted OrgIDs = %v, want [org_a]", got.OrgIDs)
	}
	if ex.Clients[1].Name != "web-b" || ex.Steps[0].Detail != "client web-b has a free permit (0 of 2 in flight)" {
		t.Error("redact changed its argument's slices")
	}
}

// TestClientExplain: Client.Explain sends host, path and ip and decodes
// the explanation.
func TestClientExplain(t *testing.T) {
	f, keyA, _ := explainFixture(t)
	c := &apiclient.Client{URL: f.url, Key: keyA.Secret}
	ex, err := c.Explain(t.Context(), "web.a.example.com", "/some/path", "203.0.113.7")
	if err != nil {
		t.Fatalf("Explain() = %v", err)
	}
	if ex.Host != "web.a.example.com" || ex.Path != "/some/path" || ex.IP != "203.0.113.7" || ex.Status != http.StatusServiceUnavailable {
		t.Errorf("Explain() = %+v, want web.a.example.com/some/path from 203.0.113.7, 503", ex)
	}
	var re *apiclient.ResponseError
	if _, err := c.Explain(t.Context(), "cold.example.com", "", ""); err != nil {
		t.Errorf("Explain(own armed bind) = %v", err)
	}
	b := &apiclient.Client{URL: f.url, Key: masterToken}
	if _, err := b.Explain(t.Context(), "bad host", "", ""); !errors.As(err, &re) || re.StatusCode != http.StatusBadRequest {
		t.Errorf("Explain(bad host) = %v, want a 400 ResponseError", err)
	}
}
