package browser_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// visitorGets waits until a visitor of app.test gets status, up to
// servertest.WaitFor: maintenance reaches the router through the store's
// change feed.
func visitorGets(t *testing.T, st *servertest.Stack, status int) {
	t.Helper()
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		code, body, err := servertest.Fetch(st.Visitor, servertest.NewRequest(t, t.Context(), st.Server, http.MethodGet, servertest.AppHost, "/", nil))
		return err == nil && code == status, fmt.Sprintf("visitor of %s = %d %q (%v), want %d", servertest.AppHost, code, body, err, status)
	})
}

// TestDashboardAdminPagesInBrowser logs in with the master token, mints
// and revokes a token (its secret shown once), turns maintenance on for
// app.test (a visitor gets 503) and off again, finds the token's minting
// in the audit log (filtered, the hash chain verified), explains a
// request, and screenshots every admin page; then a viewer key sees no
// write control.
func TestDashboardAdminPagesInBrowser(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }), nil)
	s := st.Server
	b := newBrowser(t, 1280, 800)
	b.login(t, s, servertest.Token)

	// Tokens: create, see the secret once, revoke.
	b.open(t, s.URL+"/aperio/ui/tokens", "#create-token")
	b.fill(t, "#t-name", "browser-token")
	b.fill(t, "#t-hostnames", "app.test, *.app.test")
	b.fill(t, "#t-expires", "30d")
	b.click(t, "#create-token-submit", "#new-secret")
	if secret := b.text(t, "#new-secret"); !strings.HasPrefix(secret, "apr_") {
		t.Errorf("the new token's secret reads %q, want apr_…", secret)
	}
	b.waitText(t, "#tokens", "browser-token")
	b.screenshot(t, "tokens")
	b.open(t, s.URL+"/aperio/ui/tokens", "#tokens")
	if b.has(t, "#new-secret") {
		t.Errorf("the tokens page shows the secret again")
	}
	b.acceptConfirms(t)
	b.click(t, `#tokens tr:has(form[action$="/revoke"]) button`, "")
	b.waitText(t, ".notice.done", "The token was revoked.")
	b.waitText(t, "#tokens", "revoked")

	// Maintenance: on for app.test, a visitor gets 503; off again.
	if code, body := servertest.Get(t, st.Visitor, s, servertest.AppHost, "/"); code != http.StatusOK {
		t.Fatalf("visitor before maintenance = %d %q", code, body)
	}
	b.open(t, s.URL+"/aperio/ui/maintenance", "#set-maintenance")
	b.fill(t, "#m-hostname", servertest.AppHost)
	b.fill(t, "#m-reason", "browser test")
	b.fill(t, "#m-ttl", "1h")
	b.click(t, "#set-maintenance-submit", "#maintenance")
	b.waitText(t, ".notice.done", "Maintenance is on.")
	b.waitText(t, "#maintenance", servertest.AppHost)
	b.screenshot(t, "maintenance")
	visitorGets(t, st, http.StatusServiceUnavailable)
	b.acceptConfirms(t)
	b.click(t, `#maintenance form[action$="/clear"] button`, "")
	b.waitText(t, ".notice.done", "Maintenance is off.")
	visitorGets(t, st, http.StatusOK)

	// Audit: the token's minting is there.
	b.open(t, s.URL+"/aperio/ui/audit", "#audit-filter")
	b.waitText(t, "#audit", "token_created")
	b.waitText(t, "#audit", "browser-token")
	// Filtered by event (a GET: the filter is in the URL), then the
	// chain verified with the filter kept.
	b.fill(t, "#a-event", "token_created")
	b.click(t, "#audit-filter-submit", "")
	// The unfiltered page has #audit too: wait for the filtered one.
	servertest.Poll(t, browserWait, func() (bool, string) {
		loc := b.location(t)
		return strings.Contains(loc, "event=token_created"), "the filtered audit page is " + loc + ", want event=token_created in its URL"
	})
	b.open(t, b.location(t), "#audit")
	if got := b.text(t, "#audit tbody"); strings.Contains(got, "maintenance_on") || !strings.Contains(got, "token_created") {
		t.Errorf("the audit log filtered by token_created reads %q", got)
	}
	b.click(t, "#audit-verify-submit", "#verify-result")
	b.waitText(t, "#verify-result", "intact")
	b.waitText(t, "#audit", "token_created")
	b.screenshot(t, "audit")

	// The other pages render, with their write controls for the master.
	for _, p := range []struct{ page, ready string }{
		{"keys", "#create-key"},
		{"orgs", "#create-org"},
		{"webhooks", "#create-webhook"},
		{"explain?url=" + servertest.AppHost + "%2F", "#explanation"},
	} {
		b.open(t, s.URL+"/aperio/ui/"+p.page, p.ready)
		name, _, _ := strings.Cut(p.page, "?")
		b.screenshot(t, name)
	}
	b.waitText(t, "#steps", "route")
	// At a phone's width the tables scroll inside the page.
	b.viewport(t, 390, 844)
	b.open(t, s.URL+"/aperio/ui/tokens", "#tokens")
	b.screenshot(t, "tokens-phone")
	b.viewport(t, 1280, 800)
	b.noErrors(t)

	// A viewer key sees no write control.
	code, body := servertest.AdminCall(t, st.Visitor, s, http.MethodPost, "/admin-keys", map[string]string{"name": "browser-viewer", "role": "viewer"})
	var minted struct {
		Key string `json:"key"`
	}
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &minted) != nil || minted.Key == "" {
		t.Fatalf("POST /admin-keys = %d %s", code, body)
	}
	b.click(t, "#logout", "#key")
	b.login(t, s, minted.Key)
	for _, p := range []struct{ page, list, control string }{
		{"tokens", "#tokens", `#create-token, form[action$="/revoke"]`},
		{"keys", "#keys", `#create-key, form[action$="/delete"]`},
		{"maintenance", "main h1", `#set-maintenance, form[action$="/clear"]`},
		{"webhooks", "main h1", `#create-webhook`},
		{"audit", "#audit-filter", `#audit-verify`},
	} {
		b.open(t, s.URL+"/aperio/ui/"+p.page, p.list)
		if b.has(t, p.control) {
			t.Errorf("a viewer sees a write control (%s) on the %s page", p.control, p.page)
		}
	}
	if b.has(t, `a[href="/aperio/ui/orgs"]`) {
		t.Errorf("a viewer's menu links the organizations page")
	}
	b.noErrors(t)
}
