package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func tokensFixture(f *adminFake) {
	exp := adminTestNow.Add(48 * time.Hour)
	f.answer(http.MethodGet, "/tokens", 200, []apitype.Token{
		{ID: "tok_1", OrgID: "org1", Name: "web", Prefix: "apr_ab12", Hostnames: []string{"app.test", "*.app.test"}, AllowedIPs: []string{"10.0.0.0/8"}, ExpiresAt: &exp, Status: apitype.TokenActive, CreatedBy: "master", CreatedAt: adminTestNow},
		{ID: "tok_2", OrgID: "org1", Name: "old", Prefix: "apr_cd34", Hostnames: []string{"old.test"}, Status: apitype.TokenRevoked, CreatedBy: "key:k1", CreatedAt: adminTestNow},
	})
}

func TestTokensPageRoles(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	b := render(t, u, "tokens", apitype.RoleViewer)
	contains(t, "viewer's tokens page", b, "web", "apr_ab12", "app.test, *.app.test", "10.0.0.0/8", "2026-12-04 10:00:00Z", "revoked")
	lacks(t, "viewer's tokens page", b, `action="/aperio/ui/tokens/create"`, `action="/aperio/ui/tokens/revoke"`, `name="org_id"`)
	b = render(t, u, "tokens", apitype.RoleAdmin)
	contains(t, "admin's tokens page", b, `action="/aperio/ui/tokens/create"`, `name="id" value="tok_1"`, `data-confirm="Revoke token web?`, `<label for="t-hostnames">`)
	lacks(t, "admin's tokens page", b, `value="tok_2"`, `name="org_id"`) // a revoked token has no revoke button
	f.answer(http.MethodGet, "/orgs", 200, []apitype.Org{{ID: "org1", Name: "default"}, {ID: "org2", Name: "acme"}})
	b = render(t, u, "tokens", apitype.Master)
	contains(t, "master's tokens page", b, `name="org_id"`, `<option value="org2">acme</option>`)
	if w := get(t, u, UIPrefix+"tokens", ""); w.Code != http.StatusSeeOther {
		t.Errorf("GET tokens without a session = %d, want 303 to the login", w.Code)
	}
}

func TestTokensCreateShowsSecretOnce(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	f.answer(http.MethodPost, "/tokens", http.StatusCreated, apitype.MintedToken{Token: apitype.Token{ID: "tok_3", Name: "new", Prefix: "apr_zz"}, Secret: "apr_zzSECRETsecret"})
	code, b := submit(t, u, "tokens/create", apitype.RoleAdmin, url.Values{
		"name": {" new "}, "hostnames": {"App.test, *.app.test\r\nb.test\n\n"}, "allowed_ips": {"10.0.0.1\n192.168.0.0/16"}, "expires": {"30d"},
	})
	if code != http.StatusOK {
		t.Fatalf("create = %d, want 200; %s", code, b)
	}
	exp := adminTestNow.Add(30 * 24 * time.Hour).Format(time.RFC3339)
	wantCalls(t, f, apitype.RoleAdmin, `POST /tokens {"name":"new","hostnames":["app.test","*.app.test","b.test"],"allowed_ips":["10.0.0.1","192.168.0.0/16"],"expires_at":"`+exp+`"}`)
	contains(t, "created token page", b, `<code class="secret" id="new-secret">apr_zzSECRETsecret</code>`, `data-copy="new-secret"`, "will not be shown again", "The token was created.")
	// The page after it (a reload, any later visit) never has it.
	if b := render(t, u, "tokens", apitype.RoleAdmin); strings.Contains(b, "apr_zzSECRETsecret") || strings.Contains(b, "new-secret") {
		t.Errorf("the tokens page shows the secret again")
	}
	// A time instead of a duration; the master token picks an org.
	f.answer(http.MethodGet, "/orgs", 200, []apitype.Org{{ID: "org2", Name: "acme"}})
	code, _ = submit(t, u, "tokens/create", apitype.Master, url.Values{"name": {"n"}, "hostnames": {"a.test"}, "expires": {"2030-01-02T15:04"}, "org_id": {"org2"}})
	if code != http.StatusOK {
		t.Fatalf("create with a time = %d", code)
	}
	w := f.writes()
	if got := w[len(w)-1].Body; got != `{"name":"n","hostnames":["a.test"],"expires_at":"2030-01-02T15:04:00Z","org_id":"org2"}` {
		t.Errorf("create with a time sent %s", got)
	}
}

func TestTokensCreateBadInput(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	ok := url.Values{"name": {"n"}, "hostnames": {"a.test"}}
	with := func(k, v string) url.Values {
		o := url.Values{}
		for kk, vv := range ok {
			o[kk] = vv
		}
		o.Set(k, v)
		return o
	}
	for name, c := range map[string]struct {
		form url.Values
		msg  string
	}{
		"no-name":        {with("name", "  "), "Name is required."},
		"long-name":      {with("name", strings.Repeat("n", 201)), "longer than 200 bytes"},
		"control-name":   {with("name", "a\x00b"), "without control characters"},
		"no-hostnames":   {with("hostnames", " ,\n"), "Hostnames is required."},
		"bad-hostname":   {with("hostnames", "a.test, exa mple.com"), "&#34;exa mple.com&#34; is not a hostname"},
		"ip-hostname":    {with("hostnames", "10.0.0.1"), "is not a hostname"},
		"many-hostnames": {with("hostnames", strings.Repeat("a.test,", 101)), "more than 100 entries"},
		"huge-list":      {with("allowed_ips", strings.Repeat("1", maxListBytes+1)), "longer than"},
		"bare-number":    {with("expires", "30"), "neither a duration"},
		"bad-unit":       {with("expires", "30y"), "neither a duration"},
		"past":           {with("expires", "2020-01-01T00:00"), "is not in the future"},
		"overflow":       {with("expires", "999999999d"), "neither a duration"},
		"org-for-key":    {with("org_id", "org2"), "no valid item"},
	} {
		t.Run(name, func(t *testing.T) {
			code, b := submit(t, u, "tokens/create", apitype.RoleAdmin, c.form)
			if code != http.StatusBadRequest || !strings.Contains(b, c.msg) {
				t.Errorf("create = %d, want 400 with %q; body %s", code, c.msg, b)
			}
			if !strings.Contains(b, `class="notice error"`) {
				t.Errorf("the refusal is not shown as an error")
			}
		})
	}
	wantCalls(t, f, apitype.RoleAdmin)
	// The refused form comes back filled in.
	_, b := submit(t, u, "tokens/create", apitype.RoleAdmin, url.Values{"name": {"keep-me"}, "hostnames": {"bad host"}})
	contains(t, "refused form", b, `value="keep-me"`, ">bad host</textarea>")
}

func TestTokensAPIRefusalShown(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	f.answer(http.MethodPost, "/tokens", http.StatusForbidden, map[string]string{"error": "hostname b.test belongs to another organization"})
	code, b := submit(t, u, "tokens/create", apitype.RoleAdmin, url.Values{"name": {"n"}, "hostnames": {"b.test"}})
	if code != http.StatusForbidden || !strings.Contains(b, "hostname b.test belongs to another organization") {
		t.Errorf("refused create = %d; body %s", code, b)
	}
	if strings.Contains(b, `class="secret"`) {
		t.Errorf("a refused create shows a secret box")
	}
}

func TestTokensRevoke(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	f.answer(http.MethodDelete, "/tokens/tok_1", 200, apitype.Token{ID: "tok_1"})
	w := post(t, u, UIPrefix+"tokens/revoke", apitype.RoleAdmin, url.Values{"csrf": {"tok-admin"}, "id": {"tok_1"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"tokens?done=revoke" {
		t.Fatalf("revoke = %d %q", w.Code, w.Header().Get("Location"))
	}
	wantCalls(t, f, apitype.RoleAdmin, "DELETE /tokens/tok_1")
	contains(t, "page after revoke", render(t, u, "tokens?done=revoke", apitype.RoleAdmin), "The token was revoked.")
	for _, id := range []string{"", "../admin-keys", "..", ".", "a/b", "tok 1", "tok%2F1", strings.Repeat("x", 201), "ü"} {
		if code, _ := submit(t, u, "tokens/revoke", apitype.RoleAdmin, url.Values{"id": {id}}); code != http.StatusBadRequest {
			t.Errorf("revoke id %.20q = %d, want 400", id, code)
		}
	}
	wantCalls(t, f, apitype.RoleAdmin, "DELETE /tokens/tok_1")
	// The API refuses a viewer who posts anyway; the page says so.
	f.answer(http.MethodDelete, "/tokens/tok_1", http.StatusForbidden, map[string]string{"error": "role viewer may not do this: admin required"})
	if code, b := submit(t, u, "tokens/revoke", apitype.RoleViewer, url.Values{"id": {"tok_1"}}); code != http.StatusForbidden || !strings.Contains(b, "admin required") {
		t.Errorf("viewer revoke = %d; %s", code, b)
	}
}

func TestTokensGerman(t *testing.T) {
	u, f := newAdminUI(t)
	tokensFixture(f)
	b := render(t, u, "tokens", apitype.RoleAdmin, "Accept-Language", "de")
	contains(t, "German tokens page", b, `lang="de"`, "Client-Tokens", "Token erstellen", "widerrufen")
}
