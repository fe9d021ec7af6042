package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func maintenanceFixture(f *adminFake) {
	end := adminTestNow.Add(2 * time.Hour)
	f.answer(http.MethodGet, "/maintenance", 200, []apitype.Maintenance{
		{Hostname: "app.test", OrgID: "org1", By: "key:k1", Since: adminTestNow, Reason: "upgrading <db>", ExpiresAt: &end},
		{Hostname: "*.legacy.test", OrgID: "org1", By: "master", Since: adminTestNow},
	})
}

func TestMaintenancePageRoles(t *testing.T) {
	u, f := newAdminUI(t)
	maintenanceFixture(f)
	b := render(t, u, "maintenance", apitype.RoleViewer)
	contains(t, "viewer's maintenance page", b, "app.test", "upgrading &lt;db&gt;", "2026-12-02 12:00:00Z", "*.legacy.test", "until cleared")
	lacks(t, "viewer's maintenance page", b, `action="/aperio/ui/maintenance/set"`, `action="/aperio/ui/maintenance/clear"`, "<db>")
	b = render(t, u, "maintenance", apitype.RoleOperator)
	contains(t, "operator's maintenance page", b, `action="/aperio/ui/maintenance/set"`, `name="hostname" value="*.legacy.test"`, `data-confirm="End maintenance of app.test?`)
}

func TestMaintenanceSetAndClear(t *testing.T) {
	u, f := newAdminUI(t)
	maintenanceFixture(f)
	f.answer(http.MethodPut, "/maintenance/app.test", http.StatusNoContent, nil)
	f.answer(http.MethodPut, "/maintenance/*.b.test", http.StatusNoContent, nil)
	f.answer(http.MethodDelete, "/maintenance/app.test", http.StatusNoContent, nil)
	for _, form := range []url.Values{
		{"hostname": {"App.Test."}, "reason": {" db upgrade "}, "ttl": {"1h30m"}},
		{"hostname": {"*.b.test"}},
	} {
		form.Set("csrf", "tok-operator")
		if w := post(t, u, UIPrefix+"maintenance/set", apitype.RoleOperator, form); w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"maintenance?done=set" {
			t.Fatalf("set %v = %d %q; %s", form, w.Code, w.Header().Get("Location"), w.Body)
		}
	}
	if w := post(t, u, UIPrefix+"maintenance/clear", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}, "hostname": {"app.test"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("clear = %d", w.Code)
	}
	wantCalls(t, f, apitype.RoleOperator,
		`PUT /maintenance/app.test {"reason":"db upgrade","ttl_seconds":5400}`,
		`PUT /maintenance/*.b.test {}`,
		`DELETE /maintenance/app.test`)
	contains(t, "page after clear", render(t, u, "maintenance?done=clear", apitype.RoleOperator), "Maintenance is off.")
}

func TestMaintenanceBadInput(t *testing.T) {
	u, f := newAdminUI(t)
	maintenanceFixture(f)
	wantBadForms(t, u, "maintenance/set", apitype.RoleOperator, map[string]badForm{
		"no-hostname":  {url.Values{}, "Hostname is required."},
		"bad-hostname": {url.Values{"hostname": {"app test"}}, "is not a hostname"},
		"path":         {url.Values{"hostname": {"app.test/x"}}, "is not a hostname"},
		"bare-star":    {url.Values{"hostname": {"*"}}, "is not a hostname"},
		"ip":           {url.Values{"hostname": {"10.0.0.1"}}, "is not a hostname"},
		"bare-number":  {url.Values{"hostname": {"a.test"}, "ttl": {"30"}}, "a number needs a unit"},
		"too-long-ttl": {url.Values{"hostname": {"a.test"}, "ttl": {"31d"}}, "a number needs a unit"},
		"zero-ttl":     {url.Values{"hostname": {"a.test"}, "ttl": {"0s"}}, "not a duration"},
		"negative-ttl": {url.Values{"hostname": {"a.test"}, "ttl": {"-1h"}}, "not a duration"},
		"go-syntax":    {url.Values{"hostname": {"a.test"}, "ttl": {"1.5h"}}, "not a duration"},
		"long-reason":  {url.Values{"hostname": {"a.test"}, "reason": {strings.Repeat("r", 501)}}, "longer than 500 bytes"},
		"ctl-reason":   {url.Values{"hostname": {"a.test"}, "reason": {"a\tb"}}, "control characters"},
		"invalid-utf8": {url.Values{"hostname": {"a.test"}, "reason": {"a\xffb"}}, "control characters"},
	})
	wantBadForms(t, u, "maintenance/clear", apitype.RoleOperator, map[string]badForm{
		"clear-no-host": {url.Values{"hostname": {""}}, "Hostname is required."},
	})
	wantCalls(t, f, apitype.RoleOperator)
	f.answer(http.MethodPut, "/maintenance/other.test", http.StatusForbidden, map[string]string{"error": "hostname other.test belongs to another organization"})
	if code, b := submit(t, u, "maintenance/set", apitype.RoleOperator, url.Values{"hostname": {"other.test"}}); code != http.StatusForbidden || !strings.Contains(b, "belongs to another organization") || !strings.Contains(b, `value="other.test"`) {
		t.Errorf("refused set = %d; want the API's message and the form kept", code)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "45s": 45 * time.Second, "1d12h": 36 * time.Hour, "1h30m15s": time.Hour + 30*time.Minute + 15*time.Second,
	} {
		if got, ok := parseDuration(in, maxTokenLifetime); !ok || got != want {
			t.Errorf("parseDuration(%q) = %v, %t, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "30", "d", "h1", "1x", "1.5h", "-1h", "+1h", "1 h", "1h ", "0s", "0d0h", "1H", "9999999999s", "999999999d", strings.Repeat("1s", 40), "1h\x00"} {
		if got, ok := parseDuration(in, maxTokenLifetime); ok {
			t.Errorf("parseDuration(%q) = %v, true, want a refusal", in, got)
		}
	}
	if _, ok := parseDuration("31d", maxMaintenanceTTL); ok {
		t.Errorf("parseDuration(31d, 30 days) = true, want a refusal")
	}
	if _, ok := parseDuration("30d", maxMaintenanceTTL); !ok {
		t.Errorf("parseDuration(30d, 30 days) = false, want it taken")
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30d", "1h30m", "30", "999999999d", "1.5h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseDuration(s, maxTokenLifetime)
		if ok && (d <= 0 || d > maxTokenLifetime) {
			t.Errorf("parseDuration(%q) = %v, true: outside (0, max]", s, d)
		}
	})
}

func TestMaintenanceGerman(t *testing.T) {
	u, f := newAdminUI(t)
	maintenanceFixture(f)
	contains(t, "German maintenance page", render(t, u, "maintenance", apitype.RoleOperator, "Accept-Language", "de"), "Wartung einschalten", "bis zum Beenden", "Beenden")
}
