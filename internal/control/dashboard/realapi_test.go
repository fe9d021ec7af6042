package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// The admin pages against the real admin API (SQLite in a temporary
// directory): the contract the scripted fake stands for, checked once end
// to end. The browser's session is stood in for by bearerSession: the
// cookie "bearer" carries the credential, sent to the API as a bearer
// token, and whoami's answer gets the CSRF token "tok" the dashboard's
// forms need (a bearer caller needs none, so the API ignores it).

const realMaster = "real-api-master-token"

type bearerSession struct{ api http.Handler }

func (b bearerSession) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie("bearer"); err == nil {
		r.Header.Set("Authorization", "Bearer "+c.Value)
	}
	if r.URL.Path != apitype.Prefix+"/whoami" {
		b.api.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	b.api.ServeHTTP(rec, r)
	var who apitype.WhoAmI
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &who) != nil {
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		return
	}
	who.CSRF = "tok"
	json.NewEncoder(w).Encode(who)
}

func newRealUI(t *testing.T) (*UI, *admin.API) {
	t.Helper()
	db, err := store.Open(context.Background(), store.Config{DataDir: storetest.MigratedDataDir(t)})
	if err != nil {
		t.Fatalf("store.Open() = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	api, err := admin.New(admin.Config{MasterToken: realMaster, Store: db})
	if err != nil {
		t.Fatalf("admin.New() = %v", err)
	}
	u, err := New(Config{API: bearerSession{api.Handler()}, Login: &fakeLogin{}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api
}

// realDo sends a page request as the credential cred: GET when form is
// nil, else a form post with the CSRF token.
func realDo(t *testing.T, u *UI, cred, path string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, UIPrefix+path, nil)
	if form != nil {
		form.Set("csrf", "tok")
		r = formRequest(UIPrefix+path, form)
	}
	return send(t, u, r, &http.Cookie{Name: "bearer", Value: cred})
}

// realWant fails t unless w has status code and contains every want.
func realWant(t *testing.T, what string, w *httptest.ResponseRecorder, code int, want ...string) string {
	t.Helper()
	if w.Code != code {
		t.Fatalf("%s = %d, want %d; body %s", what, w.Code, code, w.Body)
	}
	contains(t, what, w.Body.String(), want...)
	return w.Body.String()
}

// between returns the text of s between the first start and the next end.
func between(s, start, end string) string {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, end)
	return v
}

func TestAdminPagesAgainstRealAPI(t *testing.T) {
	u, _ := newRealUI(t)
	m := realMaster

	// Organizations (master only): create one, give it patterns.
	realWant(t, "create org", realDo(t, u, m, "orgs/create", url.Values{"name": {"acme"}}), http.StatusSeeOther)
	b := realWant(t, "orgs page", realDo(t, u, m, "orgs", nil), http.StatusOK, "acme")
	acme := between(b[strings.Index(b, ">acme<"):], `name="id" value="`, `"`)
	if acme == "" {
		t.Fatalf("no id for acme on the orgs page")
	}
	realWant(t, "set patterns", realDo(t, u, m, "orgs/hostnames", url.Values{"id": {acme}, "patterns": {"*.acme.test\nacme.test"}}), http.StatusSeeOther)
	realWant(t, "orgs page after", realDo(t, u, m, "orgs", nil), http.StatusOK, "*.acme.test\nacme.test</textarea>")

	// Tokens: mint one in the default organization, its secret once.
	b = realWant(t, "create token", realDo(t, u, m, "tokens/create", url.Values{"name": {"web"}, "hostnames": {"app.test, *.app.test"}, "allowed_ips": {"10.0.0.0/8"}, "expires": {"30d"}}),
		http.StatusOK, `id="new-secret">apr_`, "app.test, *.app.test", "10.0.0.0/8")
	secret := between(b, `id="new-secret">`, "<")
	b = realWant(t, "tokens page", realDo(t, u, m, "tokens", nil), http.StatusOK, "web", "active")
	if strings.Contains(b, secret) {
		t.Errorf("the tokens page shows the secret again")
	}
	if exp := time.Now().Add(30 * 24 * time.Hour).UTC().Format("2006-01-02"); !strings.Contains(b, exp) {
		t.Errorf("the token does not expire on %s", exp)
	}
	// A hostname acme owns is refused with the API's message.
	realWant(t, "create token on acme's", realDo(t, u, m, "tokens/create", url.Values{"name": {"x"}, "hostnames": {"www.acme.test"}}), http.StatusForbidden, "acme")
	id := between(b, `name="id" value="`, `"`)
	realWant(t, "revoke token", realDo(t, u, m, "tokens/revoke", url.Values{"id": {id}}), http.StatusSeeOther)
	b = realWant(t, "tokens after revoke", realDo(t, u, m, "tokens", nil), http.StatusOK, "revoked")
	lacks(t, "tokens after revoke", b, `action="/aperio/ui/tokens/revoke"`)

	// Admin keys: a viewer, who then sees no write control and whose
	// post the API refuses.
	b = realWant(t, "create key", realDo(t, u, m, "keys/create", url.Values{"name": {"watcher"}, "role": {"viewer"}}), http.StatusOK, `id="new-secret">apk_`)
	viewer := between(b, `id="new-secret">`, "<")
	for _, p := range []string{"tokens", "keys", "maintenance", "webhooks", "audit"} {
		lacks(t, "viewer's "+p, realWant(t, "viewer's "+p, realDo(t, u, viewer, p, nil), http.StatusOK), `method="post" action="/aperio/ui/`+p+`/`)
	}
	realWant(t, "viewer's orgs", realDo(t, u, viewer, "orgs", nil), http.StatusForbidden)
	realWant(t, "viewer mints", realDo(t, u, viewer, "tokens/create", url.Values{"name": {"x"}, "hostnames": {"app.test"}}), http.StatusForbidden, "admin")

	// Maintenance on a wildcard and off again.
	realWant(t, "set maintenance", realDo(t, u, m, "maintenance/set", url.Values{"hostname": {"*.app.test"}, "reason": {"upgrade"}, "ttl": {"1h"}}), http.StatusSeeOther)
	realWant(t, "maintenance page", realDo(t, u, m, "maintenance", nil), http.StatusOK, "*.app.test", "upgrade")
	realWant(t, "clear maintenance", realDo(t, u, m, "maintenance/clear", url.Values{"hostname": {"*.app.test"}}), http.StatusSeeOther)
	realWant(t, "clear again", realDo(t, u, m, "maintenance/clear", url.Values{"hostname": {"*.app.test"}}), http.StatusNotFound, "not in maintenance")

	// Webhooks: subscribe, list, refuse a private address, delete.
	realWant(t, "create webhook", realDo(t, u, m, "webhooks/create", url.Values{"url": {"https://hooks.example.com/x"}, "events": {"maintenance_on", "scaling_failed"}, "secret": {"k"}}), http.StatusSeeOther)
	b = realWant(t, "webhooks page", realDo(t, u, m, "webhooks", nil), http.StatusOK, "https://hooks.example.com/x", "maintenance_on, scaling_failed")
	realWant(t, "private webhook", realDo(t, u, m, "webhooks/create", url.Values{"url": {"https://10.0.0.1/x"}, "events": {"maintenance_on"}}), http.StatusBadRequest, "outbound policy")
	realWant(t, "delete webhook", realDo(t, u, m, "webhooks/delete", url.Values{"id": {between(b, `name="id" value="`, `"`)}}), http.StatusSeeOther)

	// The audit log has it all, newest first.
	b = realWant(t, "audit page", realDo(t, u, m, "audit", nil), http.StatusOK, "org_created", "token_minted", "token_revoked", "admin_key_created", "maintenance_on", "maintenance_off", "webhook_created")
	if i, j := strings.Index(b, "webhook_deleted"), strings.Index(b, "org_created"); i < 0 || j < i {
		t.Errorf("audit entries are not newest first")
	}
	realWant(t, "audit limit", realDo(t, u, m, "audit?limit=1", nil), http.StatusOK, "webhook_deleted")
	lacks(t, "audit limit", realDo(t, u, m, "audit?limit=1", nil).Body.String(), "org_created")

	// Filtered (the API's filters), and the chain verified.
	b = realWant(t, "audit by event", realDo(t, u, m, "audit?event=token_minted", nil), http.StatusOK, "token_minted")
	lacks(t, "audit by event", b, "<code>org_created</code>", "<code>token_revoked</code>")
	b = realWant(t, "audit by actor and hostname", realDo(t, u, m, "audit?actor=master&hostname=*.app.test", nil), http.StatusOK, "maintenance_on", "maintenance_off")
	lacks(t, "audit by actor and hostname", b, "<code>token_minted</code>")
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	realWant(t, "audit since the future", realDo(t, u, m, "audit?since="+future, nil), http.StatusOK, "No entry matches.")
	realWant(t, "audit until the future", realDo(t, u, m, "audit?until="+future+"&event=org_created", nil), http.StatusOK, "org_created")
	realWant(t, "verify", realDo(t, u, m, "audit/verify?event=token_minted", url.Values{}), http.StatusOK, "intact", "entries verifies.", "token_minted")
	realWant(t, "viewer verifies", realDo(t, u, viewer, "audit/verify", url.Values{}), http.StatusForbidden)

	// This API has no router to explain with: its refusal is shown.
	realWant(t, "explain", realDo(t, u, m, "explain?url=app.test", nil), http.StatusNotFound, "explain is not available")
}
