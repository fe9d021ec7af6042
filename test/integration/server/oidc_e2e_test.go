package server_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
)

// TestAccessOIDCEndToEnd: a service with auth: {oidc: …} behind a server
// with an oidc: block. A browser without a session is sent to the
// provider, logs in, comes back through /aperio/auth/callback on the
// app's hostname, and reaches the app, which sees X-Aperio-User and never
// the session cookie; a non-browser client gets 401; a service whose
// rules do not admit the user answers 403 after the login.
func TestAccessOIDCEndToEnd(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "user="+r.Header.Get("X-Aperio-User")+" auth="+r.Header.Get("X-Aperio-Auth")+" cookie="+r.Header.Get("Cookie"))
	}))
	allowed := config.Service{Target: backend.URL, Hostnames: []string{"wiki.test"},
		Auth: &config.Auth{OIDC: &config.OIDCAuth{AllowedDomains: []string{"example.com"}}}}
	refused := config.Service{Target: backend.URL, Hostnames: []string{"ops.test"},
		Auth: &config.Auth{OIDC: &config.OIDCAuth{AllowedEmails: []string{"someone@else.test"}}}}
	cfg := servertest.Config(t)
	cfg.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true} // the provider is on loopback
	cfg.OIDC = server.OIDCConfig{Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret}
	srv := servertest.Start(t, cfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, allowed, refused))
	servertest.WaitClients(t, servertest.NewVisitor(t, srv), srv, 1)
	_, port, _ := net.SplitHostPort(srv.Addr)

	b := oidctest.Browser(t, srv.Addr)
	get := func(c *http.Client, url string, html bool) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if html {
			req.Header.Set("Accept", "text/html")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	wiki := "http://wiki.test:" + port
	resp, body := get(b, wiki+"/page?x=1", true)
	if resp.StatusCode != http.StatusOK || body != "user=jane.doe@example.com auth=oidc cookie=" {
		t.Fatalf("browser after login = %d %q, want the app as jane by oidc, without cookies", resp.StatusCode, body)
	}
	if resp.Request.URL.String() != wiki+"/page?x=1" {
		t.Fatalf("login ended at %s, want back at %s/page?x=1", resp.Request.URL, wiki)
	}
	// The session now holds: no second trip to the provider.
	noFollow := *b
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if resp, _ := get(&noFollow, wiki+"/again", true); resp.StatusCode != http.StatusOK {
		t.Fatalf("second visit with the session = %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(newVisitorFor(t, srv), wiki+"/api", false); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("non-browser without a session = %d, want 401", resp.StatusCode)
	}
	if resp, _ := get(b, "http://ops.test:"+port+"/", true); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a service whose rules refuse jane = %d, want 403", resp.StatusCode)
	}
	if resp, _ := get(b, "http://nologin.test:"+port+"/aperio/auth/login", true); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("login route of a hostname without oidc = %d, want 404", resp.StatusCode)
	}
}

// newVisitorFor is a cookieless client that reaches *.test at s.
func newVisitorFor(t *testing.T, s *servertest.Server) *http.Client {
	c := oidctest.Browser(t, s.Addr)
	c.Jar = nil
	return c
}

// TestOIDCLogoutEndsSessionEverywhere is probe P4-2: a session cookie
// copied before logout kept opening the app. A logout now revokes the
// session in the store, so the copy is sent back to the login; an
// operator's POST /aperio/api/oidc/sessions/revoke ends every session of
// a user the same way, while a login after it works.
func TestOIDCLogoutEndsSessionEverywhere(t *testing.T) {
	t.Parallel()
	op := oidctest.Start(t)
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "user="+r.Header.Get("X-Aperio-User"))
	}))
	svc := config.Service{Target: backend.URL, Hostnames: []string{"wiki.test"},
		Auth: &config.Auth{OIDC: &config.OIDCAuth{AllowedDomains: []string{"example.com"}}}}
	cfg := servertest.Config(t)
	cfg.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true} // the provider is on loopback
	cfg.OIDC = server.OIDCConfig{Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret}
	srv := servertest.Start(t, cfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, svc))
	servertest.WaitClients(t, servertest.NewVisitor(t, srv), srv, 1)
	_, port, _ := net.SplitHostPort(srv.Addr)
	wiki := "http://wiki.test:" + port
	wikiURL, _ := url.Parse(wiki)

	send := func(c *http.Client, method, target, body string, h http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "text/html")
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// login returns a browser logged in as jane and a copy of its cookie.
	login := func() (*http.Client, string) {
		t.Helper()
		b := oidctest.Browser(t, srv.Addr)
		if resp, body := send(b, "GET", wiki+"/", "", nil); resp.StatusCode != http.StatusOK || body != "user=jane.doe@example.com" {
			t.Fatalf("login = %d %q", resp.StatusCode, body)
		}
		for _, c := range b.Jar.Cookies(wikiURL) {
			if c.Name == oidc.SessionCookie {
				return b, c.Value
			}
		}
		t.Fatal("no session cookie after the login")
		return nil, ""
	}
	// withCopy visits wiki.test with only the copied cookie.
	withCopy := func(cookie string) int {
		t.Helper()
		c := newVisitorFor(t, srv)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, _ := send(c, "GET", wiki+"/after", "", http.Header{"Cookie": {oidc.SessionCookie + "=" + cookie}})
		return resp.StatusCode
	}

	b, copied := login()
	if got := withCopy(copied); got != http.StatusOK {
		t.Fatalf("the copied cookie before logout = %d, want 200", got)
	}
	_, page := send(b, "GET", wiki+oidc.LogoutPath, "", nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("logout page without a CSRF token: %s", page)
	}
	if resp, body := send(b, "POST", wiki+oidc.LogoutPath, url.Values{"csrf": {m[1]}}.Encode(),
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("logout = %d %s", resp.StatusCode, body)
	}
	if got := withCopy(copied); got != http.StatusFound {
		t.Errorf("the copied cookie after logout = %d, want 302 to the login", got)
	}

	// An operator ends every session of jane on wiki.test.
	_, second := login()
	req := servertest.NewRequest(t, t.Context(), srv, "POST", srv.Addr, "/aperio/api/oidc/sessions/revoke", strings.NewReader(`{"hostname":"wiki.test","email":"jane.doe@example.com"}`))
	req.Header.Set("Authorization", "Bearer "+servertest.Token)
	req.Header.Set("Content-Type", "application/json")
	if resp, body := servertest.Do(t, servertest.NewVisitor(t, srv), req); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /oidc/sessions/revoke = %d %s", resp.StatusCode, body)
	}
	if got := withCopy(second); got != http.StatusFound {
		t.Errorf("jane's session after the operator revoked her sessions = %d, want 302", got)
	}
	_, third := login()
	if got := withCopy(third); got != http.StatusOK {
		t.Errorf("a login after the revocation = %d, want 200", got)
	}
}
