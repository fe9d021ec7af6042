package admin_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/store"
)

// keySession is a browser holding a key session of a fixture's API.
type keySession struct {
	base   string // the server's URL
	client *http.Client
	cookie *http.Cookie
	login  admin.KeyLogin
}

// noRedirects is a client that hands back every redirect.
func noRedirects(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// postLogin POSTs body with contentType to KeySessionPath of base, with
// the extra headers h, and returns the answer with its body read.
func postLogin(tb testing.TB, c *http.Client, base, contentType, body string, h http.Header) (*http.Response, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, base+admin.KeySessionPath, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", admin.KeySessionPath, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, data
}

// sessionCookie returns the cookie called name that resp sets, or nil.
func sessionCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// keyLoginAt logs cred in with JSON at base through c and fails unless
// it is admitted with a cookie called name.
func keyLoginAt(tb testing.TB, c *http.Client, base, cred, name string) *keySession {
	tb.Helper()
	resp, data := postLogin(tb, c, base, "application/json", jsonOf(tb, admin.KeyLoginRequest{Key: cred}), nil)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("key login = %d %s, want 200", resp.StatusCode, data)
	}
	s := &keySession{base: base, client: c, cookie: sessionCookie(resp, name)}
	if s.cookie == nil {
		tb.Fatalf("key login set cookies %v, want %s", resp.Header.Values("Set-Cookie"), name)
	}
	if err := json.Unmarshal(data, &s.login); err != nil {
		tb.Fatalf("key login answer %s: %v", data, err)
	}
	return s
}

// keyLogin logs cred in to f over plain http.
func (f *fixture) keyLogin(tb testing.TB, cred string) *keySession {
	tb.Helper()
	return keyLoginAt(tb, http.DefaultClient, f.url, cred, admin.KeySessionCookie)
}

// do sends method to path (from the root) with the session's cookie and
// csrf in X-Aperio-CSRF ("" for none).
func (s *keySession) do(tb testing.TB, method, path, body, csrf string) (*http.Response, []byte) {
	tb.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	req.AddCookie(s.cookie)
	if csrf != "" {
		req.Header.Set(admin.CSRFHeader, csrf)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, data
}

// api calls a route under Prefix with the session's CSRF token.
func (s *keySession) api(tb testing.TB, method, path, body string) (int, []byte) {
	tb.Helper()
	resp, data := s.do(tb, method, admin.Prefix+path, body, s.login.CSRF)
	return resp.StatusCode, data
}

// whoami returns GET /whoami's status and answer with the session.
func (s *keySession) whoami(tb testing.TB) (int, admin.WhoAmI) {
	tb.Helper()
	status, data := s.api(tb, http.MethodGet, "/whoami", "")
	var who admin.WhoAmI
	if status == http.StatusOK {
		if err := json.Unmarshal(data, &who); err != nil {
			tb.Fatalf("whoami %s: %v", data, err)
		}
	}
	return status, who
}

// hash is the store's key of the session: the SHA-256 of its secret.
func (s *keySession) hash(tb testing.TB) []byte {
	tb.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(s.cookie.Value)
	if err != nil {
		tb.Fatalf("session cookie %q is not base64url: %v", s.cookie.Value, err)
	}
	sum := sha256.Sum256(raw)
	return sum[:]
}

// wantCookie checks the attributes of a session cookie.
func wantCookie(t *testing.T, c *http.Cookie, name string, secure bool, maxAge int) {
	t.Helper()
	if c.Name != name || c.Path != "/" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure != secure || c.MaxAge != maxAge || c.Domain != "" {
		t.Errorf("session cookie = %q path %q httponly %v samesite %v secure %v max-age %d domain %q, want %q path / httponly samesite strict secure %v max-age %d no domain",
			c.Name, c.Path, c.HttpOnly, c.SameSite, c.Secure, c.MaxAge, c.Domain, name, secure, maxAge)
	}
}

// findAudit returns the newest entry with event and actor, or fails.
func findAudit(t *testing.T, f *fixture, event, actor string) admin.AuditEntry {
	t.Helper()
	for _, e := range f.audit(t) {
		if e.Event == event && e.Actor == actor {
			return e
		}
	}
	t.Fatalf("no audit entry %s by %s", event, actor)
	return admin.AuditEntry{}
}

// TestKeyLoginJSON logs in with an admin key and with the master token
// (JSON), with admin_oidc off: the cookie is HttpOnly, SameSite=Strict,
// Path=/, not Secure over http, lives as long as the session; the answer
// carries the CSRF token and the expiry; the session acts as its key (its
// organization and role) or as the master token; the login is audited.
func TestKeyLoginJSON(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	k := f.key(t, a, admin.RoleViewer)

	before := f.clock.Now()
	s := f.keyLogin(t, k.Secret)
	wantCookie(t, s.cookie, admin.KeySessionCookie, false, int(admin.SessionTTL/time.Second))
	if len(s.login.CSRF) < 40 {
		t.Errorf("csrf %q, want at least 256 bits", s.login.CSRF)
	}
	if exp := s.login.ExpiresAt; exp.Before(before.Add(admin.SessionTTL)) || exp.After(f.clock.Now().Add(admin.SessionTTL)) {
		t.Errorf("expires_at %v, want 8h after %v", exp, before)
	}
	status, who := s.whoami(t)
	if status != http.StatusOK || who.Actor != "key:"+k.ID || who.OrgID != a || who.Role != admin.RoleViewer || who.CSRF != s.login.CSRF {
		t.Errorf("whoami = %d %+v, want key:%s in %s as viewer with the login's csrf", status, who, k.ID, a)
	}
	e := findAudit(t, f, admin.EventAdminLogin, "key:"+k.ID)
	if e.OrgID != a || !strings.Contains(e.Detail, "role viewer") {
		t.Errorf("admin_login entry = %+v, want org %s, role viewer", e, a)
	}
	// The cookie holds a secret, never the key.
	if strings.Contains(s.cookie.Value, k.Secret) || strings.Contains(s.cookie.Value, k.Prefix) {
		t.Errorf("cookie %q carries the key", s.cookie.Value)
	}
	if _, err := f.db.AdminSessionByHash(t.Context(), s.hash(t)); err != nil {
		t.Errorf("AdminSessionByHash(the cookie's secret) = %v, want the session", err)
	}

	m := f.keyLogin(t, masterToken)
	status, who = m.whoami(t)
	if status != http.StatusOK || who.Actor != "master" || who.Role != "master" || who.CSRF != m.login.CSRF {
		t.Errorf("whoami of a master session = %d %+v, want master with the login's csrf", status, who)
	}
	if status, _ := m.api(t, http.MethodPost, "/orgs", `{"name":"made-by-session"}`); status != http.StatusCreated {
		t.Errorf("POST /orgs as a master session = %d, want 201", status)
	}
	findAudit(t, f, admin.EventAdminLogin, "master")

	// Without admin_oidc the OIDC login stays off.
	resp, err := http.Get(f.url + admin.LoginPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET %s with admin_oidc off = %d, want 404", admin.LoginPath, resp.StatusCode)
	}
}

// TestKeyLoginForm: a form login goes (303) to its redirect field when it
// is a same-host path, else to "/", or to the dashboard without one; a
// wrong key goes back to the login page with error=invalid, sets no
// cookie and is audited as login_failed.
func TestKeyLoginForm(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleAdmin)
	c := noRedirects(http.DefaultClient)
	for _, tc := range []struct {
		name, key, redirect string
		wantLocation        string
		wantCookie          bool
	}{
		{"key, redirect", k.Secret, "/aperio/ui/tokens?x=1", "/aperio/ui/tokens?x=1", true},
		{"key, no redirect", k.Secret, "", admin.KeyLoginDefaultRedirect, true},
		{"master, redirect elsewhere", masterToken, "https://evil.test/", "/", true},
		{"master, scheme-relative redirect", masterToken, "//evil.test/", "/", true},
		{"wrong key", "apk_wrong", "/aperio/ui/tokens", admin.KeyLoginPage + "?error=invalid", false},
		{"wrong master", masterToken + "x", "", admin.KeyLoginPage + "?error=invalid", false},
		{"empty key", "", "", admin.KeyLoginPage + "?error=invalid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"key": {tc.key}}
			if tc.redirect != "" {
				form.Set("redirect", tc.redirect)
			}
			resp, data := postLogin(t, c, f.url, "application/x-www-form-urlencoded", form.Encode(), nil)
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.wantLocation {
				t.Fatalf("form login = %d Location %q %s, want 303 to %q", resp.StatusCode, resp.Header.Get("Location"), data, tc.wantLocation)
			}
			ck := sessionCookie(resp, admin.KeySessionCookie)
			if (ck != nil) != tc.wantCookie {
				t.Fatalf("form login set cookie %v, want one: %v", ck, tc.wantCookie)
			}
			if ck != nil {
				wantCookie(t, ck, admin.KeySessionCookie, false, int(admin.SessionTTL/time.Second))
				s := &keySession{base: f.url, client: http.DefaultClient, cookie: ck}
				if status, _ := s.whoami(t); status != http.StatusOK {
					t.Errorf("whoami after a form login = %d, want 200", status)
				}
			}
		})
	}
	var failed int
	for _, e := range f.audit(t) {
		if e.Event == admin.EventLoginFailed {
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d login_failed entries, want 3 (one per wrong key)", failed)
	}
}

// TestKeyLoginJSONRefused: a wrong key answers JSON 401 and sets no
// cookie.
func TestKeyLoginJSONRefused(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{"apk_nope", "nope", "", masterToken[1:]} {
		resp, data := postLogin(t, http.DefaultClient, f.url, "application/json", jsonOf(t, admin.KeyLoginRequest{Key: key}), nil)
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("JSON login with %q = %d %s cookies %v, want 401 and none", key, resp.StatusCode, data, resp.Cookies())
		}
	}
}

// TestKeyLoginHTTPS: over TLS the cookie is __Host-aperio_admin_session and
// Secure; the plain name is not read there.
func TestKeyLoginHTTPS(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	k := f.key(t, a, admin.RoleOperator)
	srv := httptest.NewTLSServer(f.handler(t, admin.Config{}))
	t.Cleanup(srv.Close)
	s := keyLoginAt(t, srv.Client(), srv.URL, k.Secret, "__Host-"+admin.KeySessionCookie)
	wantCookie(t, s.cookie, "__Host-"+admin.KeySessionCookie, true, int(admin.SessionTTL/time.Second))
	if status, who := s.whoami(t); status != http.StatusOK || who.Actor != "key:"+k.ID {
		t.Errorf("whoami over https = %d %+v, want key:%s", status, who, k.ID)
	}
	plain := *s
	plain.cookie = &http.Cookie{Name: admin.KeySessionCookie, Value: s.cookie.Value}
	if status, _ := plain.whoami(t); status != http.StatusUnauthorized {
		t.Errorf("whoami over https with the http cookie name = %d, want 401", status)
	}
	// A form login over https redirects as over http.
	resp, _ := postLogin(t, noRedirects(srv.Client()), srv.URL, "application/x-www-form-urlencoded", url.Values{"key": {k.Secret}}.Encode(), nil)
	if resp.StatusCode != http.StatusSeeOther || sessionCookie(resp, "__Host-"+admin.KeySessionCookie) == nil {
		t.Errorf("form login over https = %d cookies %v, want 303 with the __Host- cookie", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
}

// TestKeySessionRolesAndCSRF: a session may do what its key may, no
// more, and every state-changing request needs the session's CSRF token.
func TestKeySessionRolesAndCSRF(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	f.own(t, a, "a.test", "*.a.test")
	viewer := f.keyLogin(t, f.key(t, a, admin.RoleViewer).Secret)
	adminKey := f.key(t, a, admin.RoleAdmin)
	adm := f.keyLogin(t, adminKey.Secret)

	body := `{"name":"t","hostnames":["app.a.test"]}`
	if status, data := viewer.api(t, http.MethodPost, "/tokens", body); status != http.StatusForbidden || !strings.Contains(string(data), "role viewer") {
		t.Errorf("POST /tokens as a viewer session = %d %s, want 403 naming the role", status, data)
	}
	if status, _ := viewer.api(t, http.MethodGet, "/tokens", ""); status != http.StatusOK {
		t.Errorf("GET /tokens as a viewer session = %d, want 200", status)
	}
	for _, tc := range []struct {
		name, csrf string
		want       int
	}{
		{"no header", "", http.StatusForbidden},
		{"wrong token", strings.Repeat("A", len(adm.login.CSRF)), http.StatusForbidden},
		{"another length", adm.login.CSRF + "x", http.StatusForbidden},
		{"another session's token", viewer.login.CSRF, http.StatusForbidden},
		{"the session's token", adm.login.CSRF, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp, data := adm.do(t, http.MethodPost, admin.Prefix+"/tokens", body, tc.csrf); resp.StatusCode != tc.want {
				t.Fatalf("POST /tokens with X-Aperio-CSRF %q = %d %s, want %d", tc.csrf, resp.StatusCode, data, tc.want)
			}
		})
	}
	if resp, _ := adm.do(t, http.MethodGet, admin.Prefix+"/tokens", "", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /tokens without the header = %d, want 200", resp.StatusCode)
	}
	var toks []admin.Token
	f.expect(t, "GET", "/tokens", masterToken, "", http.StatusOK, &toks)
	if len(toks) != 1 || toks[0].CreatedBy != "key:"+adminKey.ID {
		t.Errorf("tokens = %+v, want one created by key:%s", toks, adminKey.ID)
	}
	// A bearer credential wins over the cookie, and needs no CSRF token.
	req, err := http.NewRequest(http.MethodPost, f.url+admin.Prefix+"/tokens", strings.NewReader(`{"name":"t2","hostnames":["b.a.test"]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(viewer.cookie)
	req.Header.Set("Authorization", "Bearer "+adminKey.Secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("POST /tokens with a bearer admin key and a viewer cookie = %d, want 201", resp.StatusCode)
	}
}

// TestKeySessionLogout: logout needs POST and the CSRF token; it deletes
// the session in the store and clears the cookie, so the old cookie value
// is refused afterwards.
func TestKeySessionLogout(t *testing.T) {
	f := newFixture(t)
	s := f.keyLogin(t, f.key(t, "", admin.RoleViewer).Secret)
	other := f.keyLogin(t, masterToken)
	if resp, _ := s.do(t, http.MethodGet, admin.LogoutPath, "", ""); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET logout = %d, want 405", resp.StatusCode)
	}
	if resp, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without the token = %d, want 403", resp.StatusCode)
	}
	if resp, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", other.login.CSRF); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout with another session's token = %d, want 403", resp.StatusCode)
	}
	if status, _ := s.whoami(t); status != http.StatusOK {
		t.Fatalf("whoami after refused logouts = %d, want 200", status)
	}
	resp, data := s.do(t, http.MethodPost, admin.LogoutPath, "", s.login.CSRF)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout = %d %s, want 204", resp.StatusCode, data)
	}
	ck := sessionCookie(resp, admin.KeySessionCookie)
	if ck == nil || ck.Value != "" || ck.MaxAge >= 0 {
		t.Errorf("logout set cookie %+v, want %s cleared", ck, admin.KeySessionCookie)
	}
	_, err := f.db.AdminSessionByHash(t.Context(), s.hash(t))
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AdminSessionByHash(logged out) = %v, want ErrNotFound", err)
	}
	if status, _ := s.whoami(t); status != http.StatusUnauthorized {
		t.Errorf("whoami with the old cookie after logout = %d, want 401", status)
	}
	if resp, _ := s.do(t, http.MethodPost, admin.LogoutPath, "", s.login.CSRF); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("logout again with the old cookie = %d, want 401", resp.StatusCode)
	}
	if status, _ := other.whoami(t); status != http.StatusOK {
		t.Errorf("whoami of another session after a logout = %d, want 200", status)
	}
	// No session at all: 401.
	anon := &keySession{base: f.url, client: http.DefaultClient, cookie: &http.Cookie{Name: "unrelated", Value: "x"}}
	if resp, _ := anon.do(t, http.MethodPost, admin.LogoutPath, "", "x"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("logout without a session = %d, want 401", resp.StatusCode)
	}
}

// TestKeySessionExpiry: a session ends at its server-side expiry
// (KeySessionTTL) whatever the browser keeps: 401, audited with reason
// expired, its row deleted; each login purges the expired rows.
func TestKeySessionExpiry(t *testing.T) {
	base := newFixture(t)
	k := base.key(t, "", admin.RoleViewer)
	f := base.withConfig(t, admin.Config{KeySessionTTL: time.Hour})
	s := f.keyLogin(t, k.Secret)
	wantCookie(t, s.cookie, admin.KeySessionCookie, false, 3600)
	stale := f.keyLogin(t, k.Secret)
	f.clock.Advance(time.Hour - time.Second)
	if status, _ := s.whoami(t); status != http.StatusOK {
		t.Fatalf("whoami a second before the expiry = %d, want 200", status)
	}
	f.clock.Advance(time.Second)
	if status, _ := s.whoami(t); status != http.StatusUnauthorized {
		t.Errorf("whoami at the expiry = %d, want 401", status)
	}
	if _, err := f.db.AdminSessionByHash(t.Context(), s.hash(t)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AdminSessionByHash(expired, refused) = %v, want ErrNotFound", err)
	}
	found := false
	for _, e := range f.audit(t) {
		if e.Event == admin.EventLoginFailed && strings.Contains(e.Detail, "expired") {
			found = true
		}
	}
	if !found {
		t.Error("no login_failed entry with reason expired")
	}
	// stale was never used after its expiry: the next login purges it.
	if _, err := f.db.AdminSessionByHash(t.Context(), stale.hash(t)); err != nil {
		t.Fatalf("AdminSessionByHash(stale, before a login) = %v, want it still stored", err)
	}
	f.keyLogin(t, masterToken)
	if _, err := f.db.AdminSessionByHash(t.Context(), stale.hash(t)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AdminSessionByHash(stale, after a login) = %v, want ErrNotFound", err)
	}
	if _, err := admin.New(admin.Config{MasterToken: masterToken, Store: f.db, KeySessionTTL: -time.Second}); err == nil {
		t.Error("admin.New(negative KeySessionTTL) = nil, want an error")
	}
}

// TestKeySessionRevokedKey: deleting a key ends its sessions at once.
func TestKeySessionRevokedKey(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleAdmin)
	s := f.keyLogin(t, k.Secret)
	if status, _ := s.whoami(t); status != http.StatusOK {
		t.Fatalf("whoami = %d, want 200", status)
	}
	f.expect(t, "DELETE", "/admin-keys/"+k.ID, masterToken, "", http.StatusNoContent, nil)
	if status, _ := s.whoami(t); status != http.StatusUnauthorized {
		t.Errorf("whoami after the key was deleted = %d, want 401", status)
	}
	if status, _ := s.api(t, http.MethodPost, "/admin-keys", `{"name":"x","role":"admin"}`); status != http.StatusUnauthorized {
		t.Errorf("POST /admin-keys after the key was deleted = %d, want 401", status)
	}
}

// TestKeySessionBound: a key holds at most MaxKeySessions sessions; the
// next login ends the oldest, and no other key's.
func TestKeySessionBound(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleViewer)
	other := f.keyLogin(t, masterToken)
	var ss []*keySession
	for range admin.MaxKeySessions + 1 {
		ss = append(ss, f.keyLogin(t, k.Secret))
	}
	if status, _ := ss[0].whoami(t); status != http.StatusUnauthorized {
		t.Errorf("whoami of the oldest of %d sessions = %d, want 401", len(ss), status)
	}
	for _, i := range []int{1, admin.MaxKeySessions} {
		if status, _ := ss[i].whoami(t); status != http.StatusOK {
			t.Errorf("whoami of session %d = %d, want 200", i, status)
		}
	}
	if status, _ := other.whoami(t); status != http.StatusOK {
		t.Errorf("whoami of the master's session = %d, want 200", status)
	}
}

// TestKeyLoginHostile: bad requests to the login answer 4xx and never
// create a session; garbage cookies answer 401 without a panic.
func TestKeyLoginHostile(t *testing.T) {
	f := newFixture(t)
	k := f.key(t, "", admin.RoleViewer)
	keyJSON := jsonOf(t, admin.KeyLoginRequest{Key: k.Secret})
	keyForm := url.Values{"key": {k.Secret}}.Encode()
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, ctype, body string
		h                         http.Header
		want                      int
	}{
		{"huge JSON body", http.MethodPost, "application/json", `{"key":"` + strings.Repeat("a", admin.MaxKeyLoginBytes) + `"}`, nil, http.StatusRequestEntityTooLarge},
		{"huge form body", http.MethodPost, "application/x-www-form-urlencoded", "key=" + strings.Repeat("a", admin.MaxKeyLoginBytes), nil, http.StatusRequestEntityTooLarge},
		{"malformed form", http.MethodPost, "application/x-www-form-urlencoded", "key=%zz", nil, http.StatusBadRequest},
		{"key twice", http.MethodPost, "application/x-www-form-urlencoded", keyForm + "&" + keyForm, nil, http.StatusBadRequest},
		{"JSON not an object", http.MethodPost, "application/json", `["` + k.Secret + `"]`, nil, http.StatusBadRequest},
		{"JSON unknown field", http.MethodPost, "application/json", `{"key":"x","role":"admin"}`, nil, http.StatusBadRequest},
		{"JSON duplicate field", http.MethodPost, "application/json", `{"key":"x","key":"` + k.Secret + `"}`, nil, http.StatusBadRequest},
		{"JSON truncated", http.MethodPost, "application/json", `{"key":`, nil, http.StatusBadRequest},
		{"empty JSON", http.MethodPost, "application/json", ``, nil, http.StatusBadRequest},
		{"no content type", http.MethodPost, "", keyJSON, nil, http.StatusUnsupportedMediaType},
		{"text content type", http.MethodPost, "text/plain", keyForm, nil, http.StatusUnsupportedMediaType},
		{"malformed content type", http.MethodPost, "application/json; =", keyJSON, nil, http.StatusUnsupportedMediaType},
		{"GET", http.MethodGet, "", "", nil, http.StatusMethodNotAllowed},
		{"PUT", http.MethodPut, "application/json", keyJSON, nil, http.StatusMethodNotAllowed},
		{"other origin", http.MethodPost, "application/json", keyJSON, http.Header{"Origin": {"https://evil.test"}}, http.StatusForbidden},
		{"other scheme", http.MethodPost, "application/json", keyJSON, http.Header{"Origin": {"https://" + u.Host}}, http.StatusForbidden},
		{"null origin", http.MethodPost, "application/x-www-form-urlencoded", keyForm, http.Header{"Origin": {"null"}}, http.StatusForbidden},
		{"two origins", http.MethodPost, "application/json", keyJSON, http.Header{"Origin": {f.url, "https://evil.test"}}, http.StatusForbidden},
		{"same origin", http.MethodPost, "application/json", keyJSON, http.Header{"Origin": {f.url}}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, f.url+admin.KeySessionPath, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tc.h {
				req.Header[k] = vs
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("%s = %d %s, want %d", tc.name, resp.StatusCode, data, tc.want)
			}
			if got := sessionCookie(resp, admin.KeySessionCookie) != nil; got != (tc.want == http.StatusOK) {
				t.Errorf("%s set a session cookie: %v, want %v", tc.name, got, tc.want == http.StatusOK)
			}
		})
	}

	good := f.keyLogin(t, k.Secret)
	unknown := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		name    string
		cookies []string // values of the key session cookie, in order
		want    int
	}{
		{"empty", []string{""}, http.StatusUnauthorized},
		{"short", []string{"x"}, http.StatusUnauthorized},
		{"right length, not base64", []string{strings.Repeat("!", len(good.cookie.Value))}, http.StatusUnauthorized},
		{"padded base64", []string{good.cookie.Value[:40] + "==="}, http.StatusUnauthorized},
		{"unknown secret", []string{unknown}, http.StatusUnauthorized},
		{"huge", []string{strings.Repeat("A", 16<<10)}, http.StatusUnauthorized},
		{"the secret with a suffix", []string{good.cookie.Value + "A"}, http.StatusUnauthorized},
		{"planted before the real one", []string{unknown, "x", good.cookie.Value}, http.StatusOK},
		{"real one after four unknown", append(slices.Repeat([]string{unknown}, 4), good.cookie.Value), http.StatusOK},
		{"real one past the candidates", append(slices.Repeat([]string{unknown}, admin.MaxSessionCandidatesForTest), good.cookie.Value), http.StatusUnauthorized},
	} {
		t.Run("cookie "+tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, f.url+admin.Prefix+"/whoami", nil)
			if err != nil {
				t.Fatal(err)
			}
			parts := make([]string, len(tc.cookies))
			for i, v := range tc.cookies {
				parts[i] = admin.KeySessionCookie + "=" + v
			}
			req.Header.Set("Cookie", strings.Join(parts, "; "))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("whoami with cookies %q = %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
		})
	}
}

// TestKeyLoginSlowBody: a login whose body does not arrive within the
// read timeout answers 400 instead of holding the request open.
func TestKeyLoginSlowBody(t *testing.T) {
	t.Cleanup(admin.SetKeyLoginReadTimeoutForTest(200 * time.Millisecond))
	f := newFixture(t)
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The test's own bound, far above the server's.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"key\":", admin.KeySessionPath, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer to a stalled login: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("stalled login = %d, want 400", resp.StatusCode)
	}

	// A login in time is admitted with the short deadline in place.
	k := f.key(t, "", admin.RoleViewer)
	f.keyLogin(t, k.Secret)
}

// TestKeySessionCookieName: the key session's cookie is one the server
// strips from what it forwards to backends, and not a service login's.
func TestKeySessionCookieName(t *testing.T) {
	if admin.KeySessionCookie != access.CookieAdminSession {
		t.Errorf("KeySessionCookie = %q, access.CookieAdminSession = %q: the backends would receive the session", admin.KeySessionCookie, access.CookieAdminSession)
	}
	for _, other := range []string{oidc.SessionCookie, oidc.LoginCookie, admin.SessionCookie, admin.LoginCookie, access.CookieShare} {
		if admin.KeySessionCookie == other {
			t.Errorf("KeySessionCookie = %q, the name of another cookie of the server", other)
		}
	}
}

// TestKeySessionPlantedCookies: cookies of the session's name placed
// ahead of the real one (a sibling subdomain over plain http can set
// them) do not lock the admin out: values that cannot be a secret are
// skipped at no cost, however many, and a dozen well-formed unknown
// secrets only cost a lookup each (probe 4, P4-3, for key sessions).
func TestKeySessionPlantedCookies(t *testing.T) {
	f := newFixture(t)
	s := f.keyLogin(t, masterToken)
	for _, tc := range []struct {
		name    string
		planted []string
	}{
		{"malformed", slices.Repeat([]string{"x", "", "not-a-secret", strings.Repeat("A", 42) + "!"}, 50)},
		{"well_formed_unknown", func() []string {
			var out []string
			for i := range 12 {
				out = append(out, base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{byte(i + 1)}, 32)))
			}
			return out
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, f.url+admin.Prefix+"/whoami", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.planted {
				req.AddCookie(&http.Cookie{Name: admin.KeySessionCookie, Value: v})
			}
			req.AddCookie(s.cookie)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("whoami with %d planted %s cookies ahead of the session's = %d, want 200", len(tc.planted), admin.KeySessionCookie, resp.StatusCode)
			}
		})
	}
}
