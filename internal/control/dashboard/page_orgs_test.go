package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func orgsFixture(f *adminFake) {
	f.answer(http.MethodGet, "/orgs", 200, []apitype.Org{{ID: "org1", Name: "default", CreatedAt: adminTestNow}, {ID: "org2", Name: "acme", CreatedAt: adminTestNow}})
	f.answer(http.MethodGet, "/orgs/org1/hostnames", 200, apitype.OrgHostnames{OrgID: "org1", Patterns: []string{}})
	f.answer(http.MethodGet, "/orgs/org2/hostnames", 200, apitype.OrgHostnames{OrgID: "org2", Patterns: []string{"*.acme.test", "acme.test"}})
}

func TestOrgsPageMasterOnly(t *testing.T) {
	u, f := newAdminUI(t)
	orgsFixture(f)
	for _, role := range []string{apitype.RoleViewer, apitype.RoleOperator, apitype.RoleAdmin} {
		if w := get(t, u, UIPrefix+"orgs", role); w.Code != http.StatusForbidden {
			t.Errorf("GET orgs as %s = %d, want 403", role, w.Code)
		}
		if w := post(t, u, UIPrefix+"orgs/create", role, url.Values{"csrf": {"tok-" + role}, "name": {"x"}}); w.Code != http.StatusForbidden {
			t.Errorf("POST orgs/create as %s = %d, want 403", role, w.Code)
		}
		if strings.Contains(render(t, u, "tokens", role), `href="/aperio/ui/orgs"`) {
			t.Errorf("%s's menu links the organizations page", role)
		}
	}
	wantCalls(t, f, apitype.RoleAdmin)
	b := render(t, u, "orgs", apitype.Master)
	contains(t, "master's orgs page", b, "acme", "<code>org2</code>", "*.acme.test\nacme.test</textarea>", `action="/aperio/ui/orgs/create"`,
		`name="id" value="org2"`, `data-confirm="Replace the hostname patterns of acme?"`, `href="/aperio/ui/orgs" aria-current="page"`)
}

func TestOrgsActions(t *testing.T) {
	u, f := newAdminUI(t)
	orgsFixture(f)
	f.answer(http.MethodPost, "/orgs", http.StatusCreated, apitype.Org{ID: "org3", Name: "new"})
	f.answer(http.MethodPut, "/orgs/org2/hostnames", 200, apitype.OrgHostnames{})
	w := post(t, u, UIPrefix+"orgs/create", apitype.Master, url.Values{"csrf": {"tok-master"}, "name": {" new "}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"orgs?done=create" {
		t.Fatalf("create = %d %q", w.Code, w.Header().Get("Location"))
	}
	w = post(t, u, UIPrefix+"orgs/hostnames", apitype.Master, url.Values{"csrf": {"tok-master"}, "id": {"org2"}, "patterns": {"ACME.test\n*.acme.test, b.acme.test"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("set hostnames = %d", w.Code)
	}
	// An empty list clears them: patterns [] (not null).
	post(t, u, UIPrefix+"orgs/hostnames", apitype.Master, url.Values{"csrf": {"tok-master"}, "id": {"org2"}, "patterns": {" \n"}})
	wantCalls(t, f, apitype.Master,
		`POST /orgs {"name":"new"}`,
		`PUT /orgs/org2/hostnames {"patterns":["acme.test","*.acme.test","b.acme.test"]}`,
		`PUT /orgs/org2/hostnames {"patterns":[]}`)
	// Bad input: 400, the API not called, the refused patterns kept.
	for name, form := range map[string]url.Values{
		"no-name":     {"name": {""}},
		"bad-pattern": {"id": {"org2"}, "patterns": {"a..test"}},
		"wildcard*":   {"id": {"org2"}, "patterns": {"a.*.test"}},
		"no-id":       {"patterns": {"a.test"}},
	} {
		action := "orgs/create"
		if _, ok := form["patterns"]; ok {
			action = "orgs/hostnames"
		}
		code, b := submit(t, u, action, apitype.Master, form)
		if code != http.StatusBadRequest || !strings.Contains(b, `class="notice error"`) {
			t.Errorf("%s: %s = %d, want 400 with a message", name, action, code)
		}
		if name == "bad-pattern" && !strings.Contains(b, ">a..test</textarea>") {
			t.Errorf("the refused patterns are not kept in their textarea")
		}
	}
	if n := len(f.writes()); n != 3 {
		t.Errorf("bad input reached the API: %v", f.writes())
	}
	f.answer(http.MethodPut, "/orgs/org2/hostnames", http.StatusConflict, map[string]string{"error": "pattern a.test overlaps default's a.test"})
	if code, b := submit(t, u, "orgs/hostnames", apitype.Master, url.Values{"id": {"org2"}, "patterns": {"a.test"}}); code != http.StatusConflict || !strings.Contains(b, "overlaps default") {
		t.Errorf("refused patterns = %d; %s", code, b)
	}
}

func TestOrgsGerman(t *testing.T) {
	u, f := newAdminUI(t)
	orgsFixture(f)
	contains(t, "German orgs page", render(t, u, "orgs", apitype.Master, "Accept-Language", "de"), "Organisation erstellen", "Hostnamen-Muster")
}
