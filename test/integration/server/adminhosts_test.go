package server_test

import (
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/server"
)

// TestAdminHostsKeepTenantsOut is the attack of security probe F5: an
// operator who logs in to the dashboard on a tenant's hostname shares an
// origin with that tenant's app, whose scripts read /whoami's CSRF token
// and act as the operator. The dashboard, the admin API and the admin
// login now answer only on admin_hosts (by default IP addresses,
// localhost and *.localhost): on the tenant's hostname each is a 404
// naming the setting, while the tunnel, the health endpoints, the JWKS,
// metrics and the visitors' login routes stay on every hostname. The
// tenant's backend cannot set the server's cookies either.
func TestAdminHostsKeepTenantsOut(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, c := range []string{
			"aperio_admin_session=planted; Path=/",
			"__Host-aperio_session=planted; Path=/; Secure",
			"APERIO_SHARE=planted",
			"__secure-Aperio_Affinity=planted",
			" aperio_admin =planted",
			"app=1; Path=/",
		} {
			w.Header().Add("Set-Cookie", c)
		}
		w.Write([]byte("app"))
	}), func(c *server.Config) { c.MetricsToken = "m-token" })
	srv, c := st.Server, st.Visitor
	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method, host, path, body string, edit func(*http.Request)) (*http.Response, string) {
		t.Helper()
		req := servertest.NewRequest(t, t.Context(), srv, method, host, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if edit != nil {
			edit(req)
		}
		return servertest.Do(t, &noFollow, req)
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+servertest.Token) }
	login := url.Values{"key": {servertest.Token}, "redirect": {admin.Prefix + "/whoami"}}.Encode()

	// The attack: the key login and the API on the tenant's hostname.
	for _, tc := range []struct {
		name, method, path, body string
		edit                     func(*http.Request)
	}{
		{"key login", http.MethodPost, admin.KeySessionPath, login, func(r *http.Request) { r.Header.Set("Origin", "http://"+servertest.AppHost) }},
		{"whoami with the master token", http.MethodGet, admin.Prefix + "/whoami", "", bearer},
		{"token minting", http.MethodPost, admin.Prefix + "/tokens", `{"name":"stolen","hostnames":["a.test"]}`, bearer},
		{"api root", http.MethodGet, admin.Prefix, "", bearer},
		{"dashboard", http.MethodGet, "/aperio/", "", nil},
		{"dashboard login page", http.MethodGet, "/aperio/ui/login", "", nil},
		{"dashboard asset", http.MethodGet, "/aperio/ui/assets/app.js", "", nil},
		{"admin oidc login", http.MethodGet, "/aperio/admin/login", "", nil},
		{"admin logout", http.MethodPost, "/aperio/admin/logout", "", nil},
	} {
		for _, host := range []string{servertest.AppHost, "APP.test:80", "app.test."} {
			resp, body := send(tc.method, host, tc.path, tc.body, tc.edit)
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "admin_hosts") || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s on %s = %d %q, want a JSON 404 naming admin_hosts", tc.name, host, resp.StatusCode, body)
			}
			if len(resp.Header.Values("Set-Cookie")) != 0 {
				t.Errorf("%s on %s set %q", tc.name, host, resp.Header.Values("Set-Cookie"))
			}
		}
	}

	// On the server's address the same login works, as before.
	resp, body := send(http.MethodPost, srv.Addr, admin.KeySessionPath, login, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("key login on %s = %d %s, want 303", srv.Addr, resp.StatusCode, body)
	}
	for _, host := range []string{srv.Addr, "localhost", "ops.localhost:8080", "[::1]:8080", "127.0.0.1"} {
		if resp, body := send(http.MethodGet, host, admin.Prefix+"/whoami", "", bearer); resp.StatusCode != http.StatusOK {
			t.Errorf("whoami on %s = %d %s, want 200", host, resp.StatusCode, body)
		}
	}

	// What stays on every hostname.
	for _, tc := range []struct {
		path string
		edit func(*http.Request)
		want int
	}{
		{"/aperio/healthz", nil, http.StatusOK},
		{"/aperio/readyz", nil, http.StatusOK},
		{"/aperio/health", nil, http.StatusOK},
		{"/aperio/.well-known/jwks.json", nil, http.StatusOK},
		{"/aperio/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer m-token") }, http.StatusOK},
		{"/aperio/auth/login", nil, http.StatusNotFound}, // no service of app.test requires a login
		{"/aperio/tunnel", nil, 0}, // not an upgrade: refused by the tunnel endpoint itself
	} {
		resp, body := send(http.MethodGet, servertest.AppHost, tc.path, "", tc.edit)
		if strings.Contains(body, "admin_hosts") || (tc.want != 0 && resp.StatusCode != tc.want) {
			t.Errorf("%s on %s = %d %q, want %d from its own handler", tc.path, servertest.AppHost, resp.StatusCode, body, tc.want)
		}
	}

	// The app's own cookie passes; the server's namespace does not.
	resp, body = send(http.MethodGet, servertest.AppHost, "/", "", nil)
	if got := resp.Header.Values("Set-Cookie"); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != "app=1; Path=/" {
		t.Errorf("app answer = %d %q with Set-Cookie %q, want only the app's own cookie", resp.StatusCode, body, got)
	}
}

// TestAdminHostsSetting: with admin_hosts set, only its names (exact,
// wildcard, address) serve the operators' pages; the default's
// addresses and localhost no longer do.
func TestAdminHostsSetting(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, func() server.Config {
		c := servertest.Config(t)
		c.AdminHosts = []string{"admin.test", "*.ops.test", "192.0.2.1"}
		return c
	}(), nil, nil)
	c := servertest.NewVisitor(t, srv)
	for host, want := range map[string]int{
		"admin.test":      http.StatusOK,
		"ADMIN.test:443":  http.StatusOK,
		"a.ops.test":      http.StatusOK,
		"192.0.2.1:8080":  http.StatusOK,
		"ops.test":        http.StatusNotFound,
		srv.Addr:          http.StatusNotFound,
		"localhost":       http.StatusNotFound,
		"x.localhost":     http.StatusNotFound,
		"evil-admin.test": http.StatusNotFound,
	} {
		req := servertest.NewRequest(t, t.Context(), srv, http.MethodGet, host, admin.Prefix+"/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		if resp, body := servertest.Do(t, c, req); resp.StatusCode != want {
			t.Errorf("whoami on %s = %d %s, want %d", host, resp.StatusCode, body, want)
		}
	}
	// A bad entry refuses the configuration, naming it.
	bad := servertest.Config(t)
	bad.AdminHosts = []string{"admin.test", "http://x", "*"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "admin_hosts") || !strings.Contains(err.Error(), `"http://x"`) || !strings.Contains(err.Error(), `"*"`) {
		t.Errorf("Validate(admin_hosts with bad entries) = %v, want an error naming admin_hosts and each bad entry", err)
	}
	many := servertest.Config(t)
	many.AdminHosts = make([]string, server.MaxAdminHosts+1)
	for i := range many.AdminHosts {
		many.AdminHosts[i] = "a.test"
	}
	if err := many.Validate(); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Validate(%d admin_hosts) = %v, want the bound", len(many.AdminHosts), err)
	}
}
