package server_test

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
)

// TestAccessOIDCEndToEnd: a service with auth: {oidc: …} behind a server
// with an oidc: block. A browser without a session is sent to the
// provider, logs in, comes back through /aperio/auth/callback on the
// app's hostname, and reaches the app, which sees X-Aperio-User and never
// the session cookie; a non-browser client gets 401; a service whose
// rules do not admit the user answers 403 after the login.
func TestAccessOIDCEndToEnd(t *testing.T) {
	op := oidctest.Start(t)
	backend := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "user="+r.Header.Get("X-Aperio-User")+" auth="+r.Header.Get("X-Aperio-Auth")+" cookie="+r.Header.Get("Cookie"))
	}))
	allowed := config.Service{Target: backend.URL, Hostnames: []string{"wiki.test"},
		Auth: &config.Auth{OIDC: &config.OIDCAuth{AllowedDomains: []string{"example.com"}}}}
	refused := config.Service{Target: backend.URL, Hostnames: []string{"ops.test"},
		Auth: &config.Auth{OIDC: &config.OIDCAuth{AllowedEmails: []string{"someone@else.test"}}}}
	cfg := serverConfig(t)
	cfg.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true} // the provider is on loopback
	cfg.OIDC = server.OIDCConfig{Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret}
	srv := startServer(t, cfg, nil, nil)
	startAgent(t, srv, agentConfig(srv, allowed, refused))
	waitClients(t, newVisitor(t, srv), srv, 1)
	_, port, _ := net.SplitHostPort(srv.addr)

	b := oidctest.Browser(t, srv.addr)
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
func newVisitorFor(t *testing.T, s *testServer) *http.Client {
	c := oidctest.Browser(t, s.addr)
	c.Jar = nil
	return c
}
