package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
)

// adminOIDCConfig returns a server configuration with the oidc: block on
// op and admin_oidc on, mapping jane.doe@example.com (the provider's
// default user) to the default organization as admin.
func adminOIDCConfig(t *testing.T, op *oidctest.Provider) server.Config {
	t.Helper()
	cfg := servertest.Config(t)
	cfg.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true} // the provider is on loopback
	cfg.OIDC = server.OIDCConfig{Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret}
	cfg.AdminOIDC = true
	cfg.AdminOIDCRoles = []server.AdminOIDCRole{{Email: "jane.doe@example.com", Org: "default", Role: "admin"}}
	cfg.MetricsToken = "m-token"
	return cfg
}

// TestAdminOIDCEndToEnd: a browser logs in to the admin API through the
// provider and the shared callback, on a hostname that is also an app's.
// Its session answers GET /whoami (actor, organization, role, CSRF
// token), needs the token on a POST, never reaches the app's backend,
// ends at logout; a user no entry maps is refused at the callback; every
// login is counted in aperio_auth_total{method="admin_oidc"}.
func TestAdminOIDCEndToEnd(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "cookie="+r.Header.Get("Cookie"))
	}))
	cfg := adminOIDCConfig(t, op)
	cfg.AdminHosts = []string{"ops.test"} // the operator made the app's hostname an admin host
	srv := servertest.Start(t, cfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, config.Service{Target: backend.URL, Hostnames: []string{"ops.test"}}))
	servertest.WaitClients(t, servertest.NewVisitor(t, srv), srv, 1)
	_, port, _ := net.SplitHostPort(srv.Addr)
	base := "http://ops.test:" + port

	b := oidctest.Browser(t, srv.Addr)
	call := func(method, path, body, csrf string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if csrf != "" {
			req.Header.Set(admin.CSRFHeader, csrf)
		}
		resp, err := b.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(data)
	}

	status, body := call("GET", admin.LoginPath+"?redirect="+url.QueryEscape(admin.Prefix+"/whoami"), "", "")
	var who admin.WhoAmI
	if err := json.Unmarshal([]byte(body), &who); status != http.StatusOK || err != nil {
		t.Fatalf("login ending at whoami = %d %s", status, body)
	}
	if who.Actor != "oidc:jane.doe@example.com" || who.Role != "admin" || !strings.HasPrefix(who.OrgID, "org_") || who.CSRF == "" {
		t.Fatalf("whoami = %+v, want jane as admin of the default organization, with a csrf token", who)
	}
	tokenBody := `{"name":"t","hostnames":["new.test"]}`
	if status, body := call("POST", admin.Prefix+"/tokens", tokenBody, ""); status != http.StatusForbidden {
		t.Errorf("POST /tokens by session without X-Aperio-CSRF = %d %s, want 403", status, body)
	}
	if status, body := call("POST", admin.Prefix+"/tokens", tokenBody, who.CSRF); status != http.StatusCreated {
		t.Errorf("POST /tokens by session with its token = %d %s, want 201", status, body)
	}
	if status, body := call("GET", "/page", "", ""); status != http.StatusOK || strings.Contains(body, "aperio_admin") {
		t.Errorf("the app on the admin's hostname = %d %q, want 200 without the admin cookies", status, body)
	}
	if status, _ := call("POST", admin.LogoutPath, "", who.CSRF); status != http.StatusNoContent {
		t.Errorf("logout = %d, want 204", status)
	}
	if status, _ := call("GET", admin.Prefix+"/whoami", "", ""); status != http.StatusUnauthorized {
		t.Errorf("whoami after logout = %d, want 401", status)
	}

	op.QueueUser(oidctest.User("mallory@example.net", true))
	if status, _ := call("GET", admin.LoginPath, "", ""); status != http.StatusForbidden {
		t.Errorf("login of an unmapped user = %d, want 403", status)
	}

	req := servertest.NewRequest(t, t.Context(), srv, "GET", "anything.test", "/aperio/metrics", nil)
	req.Header.Set("Authorization", "Bearer m-token")
	_, metrics := servertest.Do(t, servertest.NewVisitor(t, srv), req)
	for _, want := range []string{
		`aperio_auth_total{method="admin_oidc",outcome="admitted"} 1`,
		`aperio_auth_total{method="admin_oidc",outcome="denied"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestAdminOIDCChargedToIPBucket: requests carrying an admin session
// cookie (OIDC or key), valid or not, and the admin login's paths cost a token of the
// visitor's bucket like credentialed admin requests; anonymous ones stay
// free.
func TestAdminOIDCChargedToIPBucket(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	for _, tc := range []struct {
		name, path string
		h          http.Header
		charged    bool
	}{
		{"forged session cookie", admin.Prefix + "/whoami", http.Header{"Cookie": {admin.SessionCookie + "=forged"}}, true},
		{"forged __Host- session cookie", admin.Prefix + "/whoami", http.Header{"Cookie": {"__Host-" + admin.SessionCookie + "=forged"}}, true},
		{"forged key session cookie", admin.Prefix + "/whoami", http.Header{"Cookie": {admin.KeySessionCookie + "=forged"}}, true},
		{"forged __Host- key session cookie", admin.Prefix + "/whoami", http.Header{"Cookie": {"__Host-" + admin.KeySessionCookie + "=forged"}}, true},
		{"login", admin.LoginPath, nil, true},
		{"key login", admin.KeySessionPath, nil, true},
		{"logout", admin.LogoutPath, nil, true},
		{"anonymous", admin.Prefix + "/whoami", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := adminOIDCConfig(t, op)
			cfg.Router.IPLimitMax, cfg.Router.IPLimitRefill = 4, 0.0001
			st := servertest.StartStackFor(t, servertest.Service(servertest.Backend(t, servertest.HeaderEcho()).URL), func(c *server.Config) { *c = mergeAdminOIDC(*c, cfg) }, false)
			// The login's redirect to the provider is the answer.
			c := *st.Visitor
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			// The agent's handshake took one token of the bucket.
			var last *http.Response
			for range 4 {
				last, _ = servertest.EdgeVisit(t, &c, st.Server, "ops.localhost", tc.path, tc.h)
			}
			limited := last.StatusCode == http.StatusTooManyRequests && strings.HasPrefix(last.Header.Get("X-Aperio-Limit"), "ip;")
			if limited != tc.charged {
				t.Errorf("GET %s #4 = %d (x-aperio-limit %q), charged = %v, want %v", tc.path, last.StatusCode, last.Header.Get("X-Aperio-Limit"), limited, tc.charged)
			}
		})
	}
}

// mergeAdminOIDC lays the admin login and bucket settings of from over c,
// keeping c's listener and store.
func mergeAdminOIDC(c, from server.Config) server.Config {
	c.Outbound, c.OIDC, c.AdminOIDC, c.AdminOIDCRoles = from.Outbound, from.OIDC, from.AdminOIDC, from.AdminOIDCRoles
	c.Router.IPLimitMax, c.Router.IPLimitRefill = from.Router.IPLimitMax, from.Router.IPLimitRefill
	return c
}

// TestAdminOIDCNeedsProvider: admin_oidc without the oidc: block is a
// configuration error.
func TestAdminOIDCNeedsProvider(t *testing.T) {
	t.Parallel()
	cfg := servertest.Config(t)
	cfg.AdminOIDC = true
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "admin_oidc needs the oidc: block") {
		t.Fatalf("Validate() = %v, want admin_oidc needs the oidc: block", err)
	}
	cfg.OIDC = server.OIDCConfig{Issuer: "https://login.example.com", ClientID: "c", ClientSecret: "s"}
	cfg.AdminOIDCRoles = []server.AdminOIDCRole{{Email: "a@x.test", Org: "o", Role: "master"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("admin_oidc_roles[%d]: role master is never granted", 0)) {
		t.Fatalf("Validate() with role master = %v, want it refused", err)
	}
}
