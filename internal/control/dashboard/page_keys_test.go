package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func keysFixture(f *adminFake) {
	f.answer(http.MethodGet, "/admin-keys", 200, []apitype.Key{
		{ID: "key_1", OrgID: "org1", Name: "ci", Role: apitype.RoleOperator, Prefix: "apk_ab", CreatedBy: "master", CreatedAt: adminTestNow},
	})
}

func TestKeysPageRoles(t *testing.T) {
	u, f := newAdminUI(t)
	keysFixture(f)
	for _, role := range []string{apitype.RoleViewer, apitype.RoleOperator} {
		b := render(t, u, "keys", role)
		contains(t, role+"'s keys page", b, "ci", "apk_ab", "operator")
		lacks(t, role+"'s keys page", b, `action="/aperio/ui/keys/create"`, `action="/aperio/ui/keys/delete"`)
	}
	b := render(t, u, "keys", apitype.RoleAdmin)
	contains(t, "admin's keys page", b, `action="/aperio/ui/keys/create"`, `name="id" value="key_1"`, `data-confirm="Delete admin key ci?`,
		`<option value="viewer">`, `<option value="operator">`, `<option value="admin">`, `<label for="k-role">`)
}

func TestKeysCreateShowsSecretOnce(t *testing.T) {
	u, f := newAdminUI(t)
	keysFixture(f)
	f.answer(http.MethodPost, "/admin-keys", http.StatusCreated, apitype.MintedKey{Key: apitype.Key{ID: "key_2", Name: "deploy", Role: apitype.RoleViewer}, Secret: "apk_SECRETvalue"})
	code, b := submit(t, u, "keys/create", apitype.RoleAdmin, url.Values{"name": {"deploy"}, "role": {"viewer"}})
	if code != http.StatusOK {
		t.Fatalf("create = %d; %s", code, b)
	}
	wantCalls(t, f, apitype.RoleAdmin, `POST /admin-keys {"name":"deploy","role":"viewer"}`)
	contains(t, "created key page", b, `<code class="secret" id="new-secret">apk_SECRETvalue</code>`, `data-copy="new-secret"`, "will not be shown again", "New admin key deploy (viewer)")
	if b := render(t, u, "keys", apitype.RoleAdmin); strings.Contains(b, "apk_SECRETvalue") {
		t.Errorf("the keys page shows the secret again")
	}
	// The listing failing after the key was minted still shows the secret.
	f.answer(http.MethodGet, "/admin-keys", http.StatusServiceUnavailable, map[string]string{"error": "store unavailable"})
	code, b = submit(t, u, "keys/create", apitype.RoleAdmin, url.Values{"name": {"deploy"}, "role": {"viewer"}})
	if code != http.StatusOK || !strings.Contains(b, "apk_SECRETvalue") || !strings.Contains(b, "store unavailable") {
		t.Errorf("create with a failing listing = %d, want the secret and the listing's error; %s", code, b)
	}
}

func TestKeysBadInput(t *testing.T) {
	u, f := newAdminUI(t)
	keysFixture(f)
	wantBadForms(t, u, "keys/create", apitype.RoleAdmin, map[string]badForm{
		"no-name":    {url.Values{"role": {"viewer"}}, "Name is required."},
		"bad-role":   {url.Values{"name": {"n"}, "role": {"master"}}, "Role must be viewer, operator or admin."},
		"no-role":    {url.Values{"name": {"n"}}, "Role must be"},
		"newline":    {url.Values{"name": {"a\nb"}, "role": {"viewer"}}, "control characters"},
		"org-as-key": {url.Values{"name": {"n"}, "role": {"viewer"}, "org_id": {"org2"}}, "no valid item"},
	})
	if code, _ := submit(t, u, "keys/delete", apitype.RoleAdmin, url.Values{"id": {"../tokens"}}); code != http.StatusBadRequest {
		t.Errorf("delete with a path for an id = %d, want 400", code)
	}
	wantCalls(t, f, apitype.RoleAdmin)
}

func TestKeysDelete(t *testing.T) {
	u, f := newAdminUI(t)
	keysFixture(f)
	f.answer(http.MethodDelete, "/admin-keys/key_1", http.StatusNoContent, nil)
	w := post(t, u, UIPrefix+"keys/delete", apitype.RoleAdmin, url.Values{"csrf": {"tok-admin"}, "id": {"key_1"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"keys?done=delete" {
		t.Fatalf("delete = %d %q", w.Code, w.Header().Get("Location"))
	}
	wantCalls(t, f, apitype.RoleAdmin, "DELETE /admin-keys/key_1")
	f.answer(http.MethodDelete, "/admin-keys/key_9", http.StatusNotFound, map[string]string{"error": `admin key "key_9" not found`})
	if code, b := submit(t, u, "keys/delete", apitype.RoleAdmin, url.Values{"id": {"key_9"}}); code != http.StatusNotFound || !strings.Contains(b, "admin key &#34;key_9&#34; not found") {
		t.Errorf("delete of an unknown key = %d; %s", code, b)
	}
}

func TestKeysGerman(t *testing.T) {
	u, f := newAdminUI(t)
	keysFixture(f)
	contains(t, "German keys page", render(t, u, "keys", apitype.RoleAdmin, "Accept-Language", "de"), "Admin-Schlüssel erstellen", "Betrachter", "Löschen")
}
