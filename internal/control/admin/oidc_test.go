package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
)

// adminHost is the hostname the tests' browsers reach the admin API by.
const adminHost = "admin.test"

// newProvider runs a real OpenID Connect provider and the server's side
// of it.
func newProvider(t *testing.T) (*oidctest.Provider, *oidc.Provider) {
	t.Helper()
	op := oidctest.Start(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := oidc.New(ctx, oidc.Config{
		Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret,
		HTTPClient: &http.Client{Transport: tr}, AllowHTTP: true, Scopes: []string{"openid", "email", "profile", "groups"},
		Keys: []oidc.Key{{ID: 1, Secret: []byte(strings.Repeat("s", 32))}},
	})
	if err != nil {
		t.Fatalf("oidc.New: %v", err)
	}
	return op, p
}

// outcomes records what OIDCConfig.Count is called with.
type outcomes struct {
	mu   sync.Mutex // guards list
	list []string
}

func (o *outcomes) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, s)
}

func (o *outcomes) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.list)
}

// withOIDC returns a fixture on f's store whose API has the admin login
// on p with roles, and cfg's other settings.
func (f *fixture) withOIDC(t *testing.T, p *oidc.Provider, roles []admin.OIDCRole, count *outcomes, cfg admin.Config) *fixture {
	t.Helper()
	cfg.OIDC = &admin.OIDCConfig{Provider: p, Roles: roles}
	if count != nil {
		cfg.OIDC.Count = count.add
	}
	return f.withConfig(t, cfg)
}

// browserSession is a browser logged in (or not) to the admin API of a
// fixture at adminHost.
type browserSession struct {
	c      *http.Client
	base   string // http://admin.test:port
	status int    // the login's last answer
	who    admin.WhoAmI
}

// login logs user in through the provider, driving every redirect with a
// cookie-jar browser, and ends at GET /whoami.
func (f *fixture) login(t *testing.T, op *oidctest.Provider, user *mockoidc.MockUser) *browserSession {
	t.Helper()
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(u.Host)
	s := &browserSession{c: oidctest.Browser(t, u.Host), base: "http://" + adminHost + ":" + port}
	op.QueueUser(user)
	status, body := s.do(t, http.MethodGet, admin.LoginPath+"?redirect="+url.QueryEscape(admin.Prefix+"/whoami"), "", "")
	s.status = status
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &s.who); err != nil {
			t.Fatalf("whoami after login: %s: %v", body, err)
		}
	}
	return s
}

// do sends method to path (from the root) with the browser's cookies and
// csrf in X-Aperio-CSRF ("" for none).
func (s *browserSession) do(t *testing.T, method, path, body, csrf string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if csrf != "" {
		req.Header.Set(admin.CSRFHeader, csrf)
	}
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// api calls an admin API route (relative to Prefix) with the session's
// CSRF token.
func (s *browserSession) api(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return s.do(t, method, admin.Prefix+path, body, s.who.CSRF)
}

// cookie returns the session cookie's value in the browser's jar.
func (s *browserSession) cookie(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.c.Jar.Cookies(u) {
		if c.Name == admin.SessionCookie {
			return c.Value
		}
	}
	return ""
}

// TestAdminLoginRoles logs users in and checks the organization and role
// each acts as: by email, domain and group, first match wins, an
// unverified email matches no email or domain entry, an unmapped user is
// refused at the callback, and a provider claiming too many groups is
// refused. Every login is counted by outcome and audited.
func TestAdminLoginRoles(t *testing.T) {
	base := newFixture(t)
	a, b := base.org(t, "a"), base.org(t, "b")
	op, p := newProvider(t)
	roles := []admin.OIDCRole{
		{Email: "Jane@X.test", Org: "a", Role: admin.RoleAdmin},
		{Domain: "x.test", Org: "a", Role: admin.RoleViewer},
		{Group: "ops", Org: "b", Role: admin.RoleOperator},
		{Group: "nobody-org", Org: "missing", Role: admin.RoleAdmin},
	}
	var count outcomes
	f := base.withOIDC(t, p, roles, &count, admin.Config{})
	many := make([]string, oidc.MaxClaimedGroups+1)
	for i := range many {
		many[i] = fmt.Sprintf("g%d", i)
	}
	for _, tc := range []struct {
		name       string
		user       *mockoidc.MockUser
		status     int
		org, role  string
		wantActor  string
		wantNoCSRF bool
	}{
		{"email, first match wins over domain", oidctest.User("jane@x.test", true), 200, a, "admin", "oidc:jane@x.test", false},
		{"domain", oidctest.User("bob@x.test", true), 200, a, "viewer", "oidc:bob@x.test", false},
		{"group", oidctest.User("carol@y.test", false, "staff", "ops"), 200, b, "operator", "oidc:carol@y.test", false},
		{"unverified email matches no email or domain", oidctest.User("jane@x.test", false), 403, "", "", "", true},
		{"unmapped", oidctest.User("eve@z.test", true, "staff"), 403, "", "", "", true},
		{"organization that does not exist", oidctest.User("fred@z.test", true, "nobody-org"), 403, "", "", "", true},
		{"too many groups", oidctest.User("gina@y.test", true, append(many, "ops")...), 403, "", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := f.login(t, op, tc.user)
			if s.status != tc.status {
				t.Fatalf("login of %s = %d, want %d", tc.user.Email, s.status, tc.status)
			}
			if tc.status != http.StatusOK {
				if v := s.cookie(t); v != "" {
					t.Errorf("refused login left a session cookie")
				}
				return
			}
			if s.who.OrgID != tc.org || s.who.Role != tc.role || s.who.Actor != tc.wantActor || s.who.CSRF == "" {
				t.Errorf("whoami = %+v, want org %s role %s actor %s and a csrf token", s.who, tc.org, tc.role, tc.wantActor)
			}
		})
	}
	want := []string{"admitted", "admitted", "admitted", "denied", "denied", "denied", "denied"}
	if got := count.get(); !slices.Equal(got, want) {
		t.Errorf("login outcomes = %v, want %v", got, want)
	}
	var logins, failed int
	for _, e := range f.audit(t) {
		switch e.Event {
		case admin.EventAdminLogin:
			logins++
			if !strings.HasPrefix(e.Actor, "oidc:") || e.OrgID == "" {
				t.Errorf("admin_login entry = %+v, want actor oidc:<email> and the organization", e)
			}
		case admin.EventLoginFailed:
			failed++
		}
	}
	if logins != 3 || failed != 4 {
		t.Errorf("audit: %d admin_login, %d login_failed, want 3 and 4", logins, failed)
	}
}

// TestAdminSessionCSRF: a session's state-changing request needs the
// session's token in X-Aperio-CSRF; GET needs none; logout is a POST
// with the token and ends the session.
func TestAdminSessionCSRF(t *testing.T) {
	base := newFixture(t)
	a := base.org(t, "a")
	base.own(t, a, "a.test", "*.a.test")
	op, p := newProvider(t)
	f := base.withOIDC(t, p, []admin.OIDCRole{{Email: "jane@x.test", Org: "a", Role: admin.RoleAdmin}}, nil, admin.Config{})
	s := f.login(t, op, oidctest.User("jane@x.test", true))
	if s.status != http.StatusOK {
		t.Fatalf("login = %d", s.status)
	}
	body := `{"name":"t","hostnames":["app.a.test"]}`
	for _, tc := range []struct {
		name, csrf string
		want       int
	}{
		{"no header", "", http.StatusForbidden},
		{"wrong token", strings.Repeat("A", len(s.who.CSRF)), http.StatusForbidden},
		{"another length", s.who.CSRF + "x", http.StatusForbidden},
		{"the session's token", s.who.CSRF, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, data := s.do(t, http.MethodPost, admin.Prefix+"/tokens", body, tc.csrf); status != tc.want {
				t.Fatalf("POST /tokens with X-Aperio-CSRF %q = %d %s, want %d", tc.csrf, status, data, tc.want)
			}
		})
	}
	if status, _ := s.do(t, http.MethodGet, admin.Prefix+"/tokens", "", ""); status != http.StatusOK {
		t.Errorf("GET /tokens without the header = %d, want 200", status)
	}
	var toks []admin.Token
	f.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, &toks)
	if len(toks) != 1 || toks[0].CreatedBy != "oidc:jane@x.test" {
		t.Errorf("tokens = %+v, want one created by oidc:jane@x.test", toks)
	}
	if status, _ := s.do(t, http.MethodGet, admin.LogoutPath, "", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET logout = %d, want 405", status)
	}
	if status, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", ""); status != http.StatusForbidden {
		t.Errorf("logout without the token = %d, want 403", status)
	}
	if status, _ := s.api(t, http.MethodGet, "/whoami", ""); status != http.StatusOK {
		t.Fatalf("whoami after a refused logout = %d, want 200", status)
	}
	if status, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", s.who.CSRF); status != http.StatusNoContent {
		t.Errorf("logout = %d, want 204", status)
	}
	if status, _ := s.api(t, http.MethodGet, "/whoami", ""); status != http.StatusUnauthorized {
		t.Errorf("whoami after logout = %d, want 401", status)
	}
}

// TestAdminSessionRefused: a session cookie that was tampered with, is
// garbage, was sealed for something else, has expired (8 h, by the sealed
// expiry, whatever the cookie's own), or whose user no entry maps any
// more, answers 401; a bearer credential wins over any cookie.
func TestAdminSessionRefused(t *testing.T) {
	base := newFixture(t)
	base.org(t, "a")
	op, p := newProvider(t)
	roles := []admin.OIDCRole{{Email: "jane@x.test", Org: "a", Role: admin.RoleViewer}}
	f := base.withOIDC(t, p, roles, nil, admin.Config{})
	s := f.login(t, op, oidctest.User("jane@x.test", true))
	if s.status != http.StatusOK {
		t.Fatalf("login = %d", s.status)
	}
	good := s.cookie(t)
	flip := []byte(good)
	flip[len(flip)/2] ^= 1
	if flip[len(flip)/2] == '-' || flip[len(flip)/2] == '_' {
		flip[len(flip)/2] = 'A'
	}
	// Without the admin_oidc_roles entry, on another API of the same
	// store and master token.
	unmapped := base.withOIDC(t, p, []admin.OIDCRole{{Email: "other@x.test", Org: "a", Role: admin.RoleAdmin}}, nil, admin.Config{})
	send := func(t *testing.T, f *fixture, value, bearer string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, f.url+admin.Prefix+"/whoami", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = adminHost
		req.AddCookie(&http.Cookie{Name: admin.SessionCookie, Value: value})
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	if got := send(t, f, good, ""); got != http.StatusOK {
		t.Fatalf("the session's own cookie = %d, want 200", got)
	}
	for _, tc := range []struct {
		name, value string
		f           *fixture
		bearer      string
		want        int
	}{
		{"tampered", string(flip), f, "", 401},
		{"garbage", "not-a-session", f, "", 401},
		{"empty", "", f, "", 401},
		{"oversized", strings.Repeat("A", 5000), f, "", 401},
		{"mapping removed", good, unmapped, "", 401},
		{"wrong bearer wins over a good cookie", good, f, "apk_wrong", 401},
		{"master token with any cookie", "garbage", f, masterToken, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := send(t, tc.f, tc.value, tc.bearer); got != tc.want {
				t.Fatalf("whoami with cookie %.20q = %d, want %d", tc.value, got, tc.want)
			}
		})
	}
	f.clock.Advance(admin.SessionTTL - time.Minute)
	if got := send(t, f, good, ""); got != http.StatusOK {
		t.Fatalf("a session a minute before its end = %d, want 200", got)
	}
	f.clock.Advance(time.Minute)
	if got := send(t, f, good, ""); got != http.StatusUnauthorized {
		t.Fatalf("a session 8 h after login = %d, want 401", got)
	}
}

// TestAdminLoginRedirect: a login returns only to a path on the same
// host; anything else (an absolute URL, //host, backslashes, encoded
// slashes, control characters) returns to "/".
func TestAdminLoginRedirect(t *testing.T) {
	base := newFixture(t)
	base.org(t, "a")
	op, p := newProvider(t)
	f := base.withOIDC(t, p, []admin.OIDCRole{{Domain: "x.test", Org: "a", Role: admin.RoleViewer}}, nil, admin.Config{})
	for _, tc := range []struct {
		redirect, want string
	}{
		{"/aperio/api/whoami?x=1", "/aperio/api/whoami?x=1"},
		{"", "/"},
		{"https://evil.test/", "/"},
		{"//evil.test/", "/"},
		{"/\\evil.test", "/"},
		{"\\\\evil.test", "/"},
		{"/%2F%2Fevil.test", "/"},
		{"/%5Cevil.test", "/"},
		{"/\t/evil.test", "/"},
		{"javascript:alert(1)", "/"},
		{"http:/evil.test", "/"},
	} {
		t.Run(tc.redirect, func(t *testing.T) {
			s := f.login(t, op, oidctest.User("bob@x.test", true))
			// Follow the login's hops up to the callback's answer.
			s.c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
				if req.URL.Hostname() == adminHost && req.URL.Path != oidc.CallbackPath {
					return http.ErrUseLastResponse
				}
				return nil
			}
			// A fresh login: the session from f.login is dropped first.
			if status, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", s.who.CSRF); status != http.StatusNoContent {
				t.Fatalf("logout = %d", status)
			}
			op.QueueUser(oidctest.User("bob@x.test", true))
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+admin.LoginPath+"?redirect="+url.QueryEscape(tc.redirect), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound || resp.Request.URL.Path != oidc.CallbackPath || resp.Header.Get("Location") != tc.want {
				t.Fatalf("callback of a login with redirect %q = %d from %s to %q, want 302 to %q", tc.redirect, resp.StatusCode, resp.Request.URL.Path, resp.Header.Get("Location"), tc.want)
			}
		})
	}
}
