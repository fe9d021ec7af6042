package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func auditFixture(f *adminFake) {
	f.answer(http.MethodGet, "/audit", 200, []apitype.AuditEntry{
		{ID: 7, Seq: 7, At: adminTestNow, Event: "token_minted", Actor: "master", Hostname: "app.test", Detail: `token tok_1 name="web"`, Hash: "ab12"},
		{ID: 6, Seq: 6, At: adminTestNow, Event: "maintenance_on", Actor: "key:k1", Hostname: "b.test", Detail: "reason=\"<x>\""},
	})
}

func TestAuditPage(t *testing.T) {
	u, f := newAdminUI(t)
	auditFixture(f)
	b := render(t, u, "audit", apitype.RoleViewer)
	contains(t, "viewer's audit page", b, "token_minted", "app.test", "token tok_1 name=&#34;web&#34;", "reason=&#34;&lt;x&gt;&#34;", `method="get" action="/aperio/ui/audit"`, `type="datetime-local"`)
	lacks(t, "viewer's audit page", b, `action="/aperio/ui/audit/verify`)
	if r := f.reads("/audit"); len(r) != 1 || r[0].Query != "" {
		t.Errorf("unfiltered audit page asked %v, want GET /audit with no query", r)
	}
	contains(t, "admin's audit page", render(t, u, "audit", apitype.RoleAdmin), `action="/aperio/ui/audit/verify"`)
}

func TestAuditFilters(t *testing.T) {
	u, f := newAdminUI(t)
	auditFixture(f)
	q := url.Values{"event": {"token_minted "}, "actor": {"master"}, "hostname": {"app.test"}, "since": {"2026-12-01T08:30"}, "until": {"2026-12-02T10:00:00Z"}, "limit": {"50"}}
	b := render(t, u, "audit?"+q.Encode(), apitype.RoleAdmin)
	r := f.reads("/audit")
	want := "actor=master&event=token_minted&hostname=app.test&limit=50&since=2026-12-01T08%3A30%3A00Z&until=2026-12-02T10%3A00%3A00Z"
	if len(r) != 1 || r[0].Query != want {
		t.Fatalf("filtered audit page asked %v, want ?%s", r, want)
	}
	// The filter is kept in the form and in the verify action.
	contains(t, "filtered audit page", b, `value="token_minted "`, `value="2026-12-01T08:30:00"`, `value="2026-12-02T10:00:00"`, `action="/aperio/ui/audit/verify?`+strings.ReplaceAll(want, "&", "&amp;")+`"`)
	wantBadQueries(t, u, "audit", apitype.RoleViewer, map[string]badQuery{
		"bad-since":    {"since=yesterday", "is not a time"},
		"bad-until":    {"until=2026-13-01T00:00", "is not a time"},
		"until<since":  {"since=2026-12-02T00:00&until=2026-12-01T00:00", "Until is before since."},
		"limit-0":      {"limit=0", "a number from 1 to 1000"},
		"limit-big":    {"limit=1001", "a number from 1 to 1000"},
		"limit-text":   {"limit=ten", "a number from 1 to 1000"},
		"ctl-event":    {"event=a%00b", "control characters"},
		"long-actor":   {"actor=" + strings.Repeat("a", 300), "longer than"},
		"long-host":    {"hostname=" + strings.Repeat("a", 400), "longer than"},
		"newline-host": {"hostname=a%0Ab", "control characters"},
	})
	if r := f.reads("/audit"); len(r) != 1 {
		t.Errorf("bad filters reached the API: %v", r[1:])
	}
	f.answer(http.MethodGet, "/audit", http.StatusBadRequest, map[string]string{"error": "event \"x\" is not an audit event"})
	if w := get(t, u, UIPrefix+"audit?event=x", apitype.RoleViewer); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "is not an audit event") {
		t.Errorf("refused filter = %d, want the API's 400 and message", w.Code)
	}
}

func TestAuditVerify(t *testing.T) {
	u, f := newAdminUI(t)
	auditFixture(f)
	f.answer(http.MethodGet, "/audit/verify", 200, apitype.AuditVerify{OK: true, Entries: 42})
	code, b := submit(t, u, "audit/verify?event=token_minted", apitype.RoleAdmin, nil)
	if code != http.StatusOK {
		t.Fatalf("verify = %d; %s", code, b)
	}
	contains(t, "verified page", b, "intact", "The chain of 42 entries verifies.", "token_minted")
	if r := f.reads("/audit"); len(r) != 1 || r[0].Query != "event=token_minted" {
		t.Errorf("verify listed %v, want the filter kept", r)
	}
	if r := f.reads("/audit/verify"); len(r) != 1 {
		t.Errorf("verify called /audit/verify %d times", len(r))
	}
	f.answer(http.MethodGet, "/audit/verify", 200, apitype.AuditVerify{OK: false, Entries: 9, Error: "entry 9: hash mismatch"})
	_, b = submit(t, u, "audit/verify", apitype.RoleAdmin, nil)
	contains(t, "broken chain page", b, "broken", "(9 entries checked)", "entry 9: hash mismatch", `role="alert"`)
	f.answer(http.MethodGet, "/audit/verify", http.StatusForbidden, map[string]string{"error": "role viewer may not do this: admin required"})
	if code, b := submit(t, u, "audit/verify", apitype.RoleViewer, nil); code != http.StatusForbidden || !strings.Contains(b, "admin required") {
		t.Errorf("viewer verify = %d, want the API's 403", code)
	}
	if w := post(t, u, UIPrefix+"audit/verify", apitype.RoleAdmin, url.Values{}); w.Code != http.StatusForbidden {
		t.Errorf("verify without the CSRF token = %d, want 403", w.Code)
	}
}

func TestAuditGerman(t *testing.T) {
	u, f := newAdminUI(t)
	auditFixture(f)
	contains(t, "German audit page", render(t, u, "audit", apitype.RoleAdmin, "Accept-Language", "de"), "Hash-Kette prüfen", "Einträge, neueste zuerst", "Seit (UTC)")
}
