package dashboard

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func explainFixture(f *adminFake) {
	f.answer(http.MethodGet, "/explain", 200, apitype.Explanation{
		Host: "app.test", Path: "/api/x", IP: "203.0.113.7", Bind: "app.test/api", OrgIDs: []string{"org1"},
		Steps: []apitype.ExplainStep{
			{Name: apitype.StepReserved, Outcome: apitype.OutcomePass, Detail: "path /api/x"},
			{Name: apitype.StepMaintenance, Outcome: apitype.OutcomeStop, Detail: "app.test in maintenance until 12:00"},
			{Name: apitype.StepIPLimit, Outcome: apitype.OutcomeSkip, Detail: "no limit"},
		},
		Clients: []apitype.ExplainClient{{ID: "conn_1", Name: "web-1", Tier: "primary", Healthy: true, Routable: true, Candidate: true, Admits: true, Free: true, Inflight: 2, Limit: 8, ForwardedPath: "/x"}},
		Verdict: "503 maintenance", Status: 503, Setting: "",
	})
}

func TestExplainPage(t *testing.T) {
	u, f := newAdminUI(t)
	explainFixture(f)
	b := render(t, u, "explain", apitype.RoleViewer)
	contains(t, "empty explain page", b, `method="get" action="/aperio/ui/explain"`, `<label for="e-url">`)
	lacks(t, "empty explain page", b, `id="explanation"`)
	if r := f.reads("/explain"); len(r) != 0 {
		t.Errorf("the empty form asked the API: %v", r)
	}
	b = render(t, u, "explain?url="+"https%3A%2F%2FApp.test%3A8443%2Fapi%2Fx%20y%3Fq%3D1&ip=203.0.113.7", apitype.RoleViewer)
	r := f.reads("/explain")
	if len(r) != 1 || r[0].Query != "host=App.test&ip=203.0.113.7&path=%2Fapi%2Fx%2520y" {
		t.Fatalf("explain asked %v", r)
	}
	contains(t, "explain page", b, "503 maintenance", `data-step="maintenance" data-outcome="stop"><span class="badge bad">stop</span>`,
		`<span class="badge ok">pass</span>`, `<span class="badge muted">skip</span>`, "app.test in maintenance until 12:00", "web-1", "2 / 8", "<code>/x</code>",
		"routing does not look at it", `value="203.0.113.7"`)
	// The order of the steps is the API's.
	if i, j := strings.Index(b, `data-step="reserved_prefix"`), strings.Index(b, `data-step="maintenance"`); i < 0 || j < i {
		t.Errorf("steps out of order")
	}
	// A URL without a scheme is taken as https; no path is /.
	render(t, u, "explain?url=app.test", apitype.RoleViewer)
	if r := f.reads("/explain"); r[len(r)-1].Query != "host=app.test&path=%2F" {
		t.Errorf("explain of a bare hostname asked %v", r[len(r)-1])
	}
}

func TestExplainBadInput(t *testing.T) {
	u, f := newAdminUI(t)
	explainFixture(f)
	wantBadQueries(t, u, "explain", apitype.RoleViewer, map[string]badQuery{
		"ftp":      {"url=ftp%3A%2F%2Fa.test%2F", "http or https URL"},
		"no-host":  {"url=https%3A%2F%2F%2Fx", "http or https URL"},
		"userinfo": {"url=https%3A%2F%2Fu%3Ap%40a.test%2F", "http or https URL"},
		"bad-ip":   {"url=a.test&ip=1.2.3", "is not an IP address"},
		"zone-ip":  {"url=a.test&ip=fe80%3A%3A1%25eth0", "is not an IP address"},
		"long-url": {"url=a.test%2F" + strings.Repeat("a", 1100), "longer than"},
		"ctl-url":  {"url=a.test%2F%01", "control characters"},
	})
	if r := f.reads("/explain"); len(r) != 0 {
		t.Errorf("bad input reached the API: %v", r)
	}
	f.answer(http.MethodGet, "/explain", http.StatusNotFound, map[string]string{"error": "hostname other.test not found in your organization"})
	if w := get(t, u, UIPrefix+"explain?url=other.test", apitype.RoleViewer); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "not found in your organization") {
		t.Errorf("refused explain = %d, want the API's 404 and message", w.Code)
	}
}

func TestExplainGerman(t *testing.T) {
	u, f := newAdminUI(t)
	explainFixture(f)
	contains(t, "German explain page", render(t, u, "explain?url=app.test", apitype.RoleViewer, "Accept-Language", "de"), "Eine Anfrage erklären", "Halt", "Stufen")
}
