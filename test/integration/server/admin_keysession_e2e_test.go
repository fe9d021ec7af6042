package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestAdminKeySessionEndToEnd: with admin_oidc off, a browser logs in
// with the master token on a hostname that is also an app's (the
// operator listed it in admin_hosts), and its
// session cookie answers GET /whoami through the server, needs the CSRF
// token on a POST, never reaches the app's backend, and ends at logout.
func TestAdminKeySessionEndToEnd(t *testing.T) {
	t.Parallel()
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("cookie=" + r.Header.Get("Cookie")))
	}))
	// The operator made the app's hostname an admin host.
	cfg := servertest.Config(t)
	cfg.AdminHosts = []string{"ops.test"}
	srv := servertest.Start(t, cfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, config.Service{Target: backend.URL, Hostnames: []string{"ops.test"}}))
	c := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, c, srv, 1)
	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	form := url.Values{"key": {servertest.Token}, "redirect": {admin.Prefix + "/whoami"}}.Encode()
	req := servertest.NewRequest(t, t.Context(), srv, http.MethodPost, "ops.test", admin.KeySessionPath, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body := servertest.Do(t, &noFollow, req)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != admin.Prefix+"/whoami" {
		t.Fatalf("key login = %d Location %q %s, want 303 to whoami", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == admin.KeySessionCookie {
			cookie = ck
		}
	}
	if cookie == nil {
		t.Fatalf("key login set %q, want %s", resp.Header.Values("Set-Cookie"), admin.KeySessionCookie)
	}
	call := func(method, path, body, csrf string) (int, string) {
		t.Helper()
		req := servertest.NewRequest(t, t.Context(), srv, method, "ops.test", path, strings.NewReader(body))
		req.AddCookie(cookie)
		req.AddCookie(&http.Cookie{Name: "app", Value: "1"})
		if csrf != "" {
			req.Header.Set(admin.CSRFHeader, csrf)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, data := servertest.Do(t, c, req)
		return resp.StatusCode, data
	}
	status, data := call(http.MethodGet, admin.Prefix+"/whoami", "", "")
	var who admin.WhoAmI
	if err := json.Unmarshal([]byte(data), &who); status != http.StatusOK || err != nil || who.Actor != "master" || who.CSRF == "" {
		t.Fatalf("whoami with the key session = %d %s, want master with a csrf token", status, data)
	}
	tokenBody := `{"name":"t","hostnames":["new.test"]}`
	if status, data := call(http.MethodPost, admin.Prefix+"/tokens", tokenBody, ""); status != http.StatusForbidden {
		t.Errorf("POST /tokens by key session without X-Aperio-CSRF = %d %s, want 403", status, data)
	}
	if status, data := call(http.MethodPost, admin.Prefix+"/tokens", tokenBody, who.CSRF); status != http.StatusCreated {
		t.Errorf("POST /tokens by key session with its token = %d %s, want 201", status, data)
	}
	if status, data := call(http.MethodGet, "/page", "", ""); status != http.StatusOK || data != "cookie=app=1" {
		t.Errorf("the app on the admin's hostname = %d %q, want 200 with only its own cookie", status, data)
	}
	if status, _ := call(http.MethodPost, admin.LogoutPath, "", who.CSRF); status != http.StatusNoContent {
		t.Errorf("logout = %d, want 204", status)
	}
	if status, _ := call(http.MethodGet, admin.Prefix+"/whoami", "", ""); status != http.StatusUnauthorized {
		t.Errorf("whoami with the old cookie after logout = %d, want 401", status)
	}
}
