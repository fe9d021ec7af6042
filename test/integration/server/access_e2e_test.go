package server_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/passhash"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestAccessBasicEndToEnd: a real client announces a basic-protected
// service; the server answers 401 with a challenge without the password
// and with a wrong one, and with the right one the backend sees the user
// and method, never the Authorization header, and a forged X-Aperio-User
// is dropped.
func TestAccessBasicEndToEnd(t *testing.T) {
	t.Parallel()
	hash, err := passhash.Hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{Basic: &config.BasicAuth{Realm: "staff", Users: map[string]string{"ann": hash}}}
	st := servertest.StartStackFor(t, svc, nil, false)

	resp, _ := servertest.GetWith(t, st, servertest.AppHost, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `Basic realm="staff"`) {
		t.Fatalf("no credentials = %d, WWW-Authenticate %q; want 401 with the realm", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, _ := servertest.GetWith(t, st, servertest.AppHost, servertest.BasicAuth("ann", "wrong")); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password = %d, want 401", resp.StatusCode)
	}
	h := servertest.BasicAuth("ann", "correct horse")
	h.Set("X-Aperio-User", "root")
	resp, body := servertest.GetWith(t, st, servertest.AppHost, h)
	if resp.StatusCode != http.StatusOK || body != `user=ann auth=basic authorization=""` {
		t.Fatalf("right password = %d %q, want 200 with user=ann auth=basic and no Authorization", resp.StatusCode, body)
	}
}

// TestAccessDenyHidesService: under default_access deny a service
// without auth answers exactly like a hostname nobody claimed, and a
// public one is served.
func TestAccessDenyHidesService(t *testing.T) {
	t.Parallel()
	backend := servertest.Backend(t, servertest.IdentityEcho())
	closed := config.Service{Target: backend.URL, Hostnames: []string{"closed.test"}}
	open := config.Service{Target: backend.URL, Hostnames: []string{"open.test"}, Public: true}
	cfg := servertest.Config(t)
	cfg.DefaultAccess = "deny"
	srv := servertest.Start(t, cfg, nil, nil)
	servertest.StartAgent(t, srv, servertest.AgentConfig(srv, closed, open))
	visitor := servertest.NewVisitor(t, srv)
	servertest.WaitClients(t, visitor, srv, 1)
	st := &servertest.Stack{Server: srv, Visitor: visitor}

	r1, b1 := servertest.GetWith(t, st, "closed.test", nil)
	r2, b2 := servertest.GetWith(t, st, "unclaimed.test", nil)
	b1 = strings.ReplaceAll(b1, "closed.test", "HOST")
	b2 = strings.ReplaceAll(b2, "unclaimed.test", "HOST")
	if r1.StatusCode != r2.StatusCode || b1 != b2 || r1.StatusCode != http.StatusBadGateway {
		t.Fatalf("closed service = %d %q, unclaimed host = %d %q; want the same 502", r1.StatusCode, b1, r2.StatusCode, b2)
	}
	if r, body := servertest.GetWith(t, st, "open.test", nil); r.StatusCode != http.StatusOK || !strings.HasPrefix(body, "user= auth=") {
		t.Fatalf("public service = %d %q, want 200 without identity", r.StatusCode, body)
	}
}

// jwksOrigin serves the public half of key as a key set and counts
// fetches.
func jwksOrigin(t *testing.T, pub ed25519.PublicKey, kid string) (url string, fetches func() int) {
	t.Helper()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: kid, Algorithm: string(jose.EdDSA), Use: "sig"}}}
	body, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	n := make(chan struct{}, 100)
	srv := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	return srv.URL + "/jwks", func() int { return len(n) }
}

func signJWT(t *testing.T, priv ed25519.PrivateKey, kid string, c jwt.Claims) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestAccessJWTThroughFence: the jwt method fetches its key set through
// the server's outbound fence. With the fence admitting the key server
// (on loopback: outbound private addresses allowed) a good token is
// admitted and a token for another audience refused; with the default
// fence the fetch is refused and the gate fails closed with 503.
func TestAccessJWTThroughFence(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwksURL, fetches := jwksOrigin(t, pub, "k1")
	claims := func(aud string) jwt.Claims {
		now := time.Now()
		return jwt.Claims{Issuer: "https://idp.test/", Audience: jwt.Audience{aud}, Subject: "ann", Expiry: jwt.NewNumericDate(now.Add(time.Hour)), IssuedAt: jwt.NewNumericDate(now)}
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{JWT: &config.JWTAuth{JWKSURL: jwksURL, Issuer: "https://idp.test/", Audience: []string{"app"}}}

	t.Run("fence admits the key server", func(t *testing.T) {
		st := servertest.StartStackFor(t, svc, func(c *server.Config) {
			c.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true}
		}, false)
		resp, body := servertest.GetWith(t, st, servertest.AppHost, bearer(signJWT(t, priv, "k1", claims("app"))))
		if resp.StatusCode != http.StatusOK || body != `user=ann auth=jwt authorization=""` {
			t.Fatalf("good token = %d %q, want 200 for ann by jwt", resp.StatusCode, body)
		}
		if resp, _ := servertest.GetWith(t, st, servertest.AppHost, bearer(signJWT(t, priv, "k1", claims("other")))); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token for another audience = %d, want 401", resp.StatusCode)
		}
		if fetches() == 0 {
			t.Fatal("the key server was never asked")
		}
	})
	t.Run("fence refuses the key server", func(t *testing.T) {
		before := fetches()
		st := servertest.StartStackFor(t, svc, func(c *server.Config) {
			c.Outbound = outbound.Policy{AllowHTTP: true} // no private addresses: loopback refused
		}, false)
		resp, _ := servertest.GetWith(t, st, servertest.AppHost, bearer(signJWT(t, priv, "k1", claims("app"))))
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("token while the key set is out of reach = %d, want 503 (fail closed)", resp.StatusCode)
		}
		if n := fetches() - before; n != 0 {
			t.Fatalf("the key server got %d fetches past the fence, want 0", n)
		}
	})
}

// TestAccessForwardEndToEnd: the forward method asks an auth service
// through the fence; its 2xx admits with the user it names, its refusal
// is what the visitor gets.
func TestAccessForwardEndToEnd(t *testing.T) {
	t.Parallel()
	auth := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Token good" {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte("go away"))
			return
		}
		w.Header().Set("Remote-User", "bob")
		w.WriteHeader(http.StatusOK)
	}))
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{Forward: &config.ForwardAuth{URL: auth.URL + "/verify", UserHeader: "Remote-User", CopyHeaders: []string{"Remote-User"}}}
	st := servertest.StartStackFor(t, svc, func(c *server.Config) {
		c.Outbound = outbound.Policy{AllowHTTP: true, AllowPrivate: true}
	}, false)
	resp, body := servertest.GetWith(t, st, servertest.AppHost, http.Header{"Authorization": {"Token bad"}})
	if resp.StatusCode != http.StatusForbidden || body != "go away" {
		t.Fatalf("refused by the auth service = %d %q, want its 403 and body", resp.StatusCode, body)
	}
	resp, body = servertest.GetWith(t, st, servertest.AppHost, http.Header{"Authorization": {"Token good"}})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "user=bob auth=forward") {
		t.Fatalf("admitted by the auth service = %d %q, want 200 for bob by forward", resp.StatusCode, body)
	}
}

// TestAccessIdentityJWKS: the server publishes its identity key set on
// every hostname without auth, and the identity token a backend receives
// verifies against it, for the right audience and issuer.
func TestAccessIdentityJWKS(t *testing.T) {
	t.Parallel()
	hash, err := passhash.Hash("pw-for-identity")
	if err != nil {
		t.Fatal(err)
	}
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{Basic: &config.BasicAuth{Users: map[string]string{"ann": hash}}}
	svc.IdentityJWT = true
	cfg := func(c *server.Config) { c.DefaultAccess = "deny" }
	st := servertest.StartStackFor(t, svc, cfg, false)

	code, body := servertest.Get(t, st.Visitor, st.Server, "anything.test", "/aperio/.well-known/jwks.json")
	if code != http.StatusOK {
		t.Fatalf("GET jwks.json = %d %q, want 200", code, body)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(body), &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("jwks.json = %q (%v), want one key", body, err)
	}
	resp, _ := servertest.GetWith(t, st, servertest.AppHost, servertest.BasicAuth("ann", "pw-for-identity"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET with the password = %d, want 200", resp.StatusCode)
	}
	tok, err := jwt.ParseSigned(resp.Header.Get("X-Identity"), []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatalf("identity token %q: %v", resp.Header.Get("X-Identity"), err)
	}
	var c struct {
		jwt.Claims
		Auth string `json:"aperio_auth"`
	}
	if err := tok.Claims(set.Keys[0].Key, &c); err != nil {
		t.Fatalf("identity token does not verify against jwks.json: %v", err)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: server.IdentityIssuer, AnyAudience: jwt.Audience{servertest.AppHost}, Time: time.Now()}, 0); err != nil || c.Subject != "ann" || c.Auth != "basic" {
		t.Fatalf("identity claims = %+v (%v), want sub ann, aperio_auth basic, aud %s", c, err, servertest.AppHost)
	}
}

// TestAccessAuditAndMetrics: refused visitors are audited as auth_denied
// (without their credentials) and counted in aperio_auth_total by method
// and outcome, admitted ones counted too.
func TestAccessAuditAndMetrics(t *testing.T) {
	t.Parallel()
	hash, err := passhash.Hash("pw-metrics")
	if err != nil {
		t.Fatal(err)
	}
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{Basic: &config.BasicAuth{Users: map[string]string{"ann": hash}}}
	st := servertest.StartStackFor(t, svc, func(c *server.Config) { c.MetricsToken = "m-token" }, false)

	if resp, _ := servertest.GetWith(t, st, servertest.AppHost, servertest.BasicAuth("ann", "secret-guess")); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password = %d, want 401", resp.StatusCode)
	}
	if resp, _ := servertest.GetWith(t, st, servertest.AppHost, servertest.BasicAuth("ann", "pw-metrics")); resp.StatusCode != http.StatusOK {
		t.Fatalf("right password = %d, want 200", resp.StatusCode)
	}
	var entries []map[string]any
	servertest.Poll(t, 10*time.Second, func() (bool, string) {
		entries = servertest.AuditEvents(t, st.Server, "auth_denied")
		return len(entries) == 1, fmt.Sprintf("%d auth_denied entries, want 1", len(entries))
	})
	detail, _ := entries[0]["detail"].(string)
	if !strings.Contains(detail, servertest.AppHost+"/ from 127.0.0.1, auth basic, answered 401") || strings.Contains(detail, "secret-guess") {
		t.Fatalf("auth_denied detail = %q, want the host, visitor, method and status, never the password", detail)
	}

	// The counters are added once a request's handler returns, which may
	// be a moment after the visitor has its answer: poll.
	servertest.Poll(t, 10*time.Second, func() (bool, string) {
		req := servertest.NewRequest(t, t.Context(), st.Server, "GET", "anything.test", "/aperio/metrics", nil)
		req.Header.Set("Authorization", "Bearer m-token")
		_, body := servertest.Do(t, st.Visitor, req)
		for _, want := range []string{
			`aperio_auth_total{method="basic",outcome="denied"} 1`,
			`aperio_auth_total{method="basic",outcome="admitted"} 1`,
		} {
			if !strings.Contains(body, want) {
				return false, "metrics lack " + want
			}
		}
		return true, ""
	})
}

// TestAccessShareLink: a share link minted through the admin API opens a
// basic-protected service: its first visit sets the cookie and redirects
// without the token, the cookie then passes the gate (the backend sees
// X-Aperio-Auth share), a tampered token does not, and the link is
// audited as share_created; after a rotation of the share key the cookie
// still passes, after a rotation with revoke it is refused.
func TestAccessShareLink(t *testing.T) {
	t.Parallel()
	hash, err := passhash.Hash("pw-share")
	if err != nil {
		t.Fatal(err)
	}
	svc := servertest.Service(servertest.Backend(t, servertest.IdentityEcho()).URL)
	svc.Auth = &config.Auth{Basic: &config.BasicAuth{Users: map[string]string{"ann": hash}}}
	st := servertest.StartStackFor(t, svc, nil, false)

	code, body := servertest.AdminCall(t, st.Visitor, st.Server, "POST", "/share", map[string]string{"hostname": servertest.AppHost, "path": "/docs", "ttl": "1h"})
	if code != http.StatusCreated {
		t.Fatalf("POST /share = %d %s, want 201", code, body)
	}
	var link struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(body), &link); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(link.URL)
	if err != nil || u.Host != servertest.AppHost || u.Path != "/docs" || u.Query().Get("aperio_share") == "" {
		t.Fatalf("share URL = %q, want %s/docs with aperio_share", link.URL, servertest.AppHost)
	}
	noRedirect := &http.Client{Transport: st.Visitor.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	visit := func(path string, cookie *http.Cookie) (*http.Response, string) {
		req := servertest.NewRequest(t, t.Context(), st.Server, http.MethodGet, servertest.AppHost, path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		return servertest.Do(t, noRedirect, req)
	}
	resp, _ := visit(u.RequestURI(), nil)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "aperio_share" {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusFound || cookie == nil || !cookie.HttpOnly || strings.Contains(resp.Header.Get("Location"), "aperio_share") {
		t.Fatalf("first visit = %d, Location %q, cookie %+v; want 302 setting an HttpOnly aperio_share cookie, without the token in Location", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	resp, body = visit("/docs/page", &http.Cookie{Name: "aperio_share", Value: cookie.Value})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "auth=share") {
		t.Fatalf("visit with the cookie = %d %q, want 200 by share", resp.StatusCode, body)
	}
	if resp, _ := visit("/other", &http.Cookie{Name: "aperio_share", Value: cookie.Value}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the cookie outside the link's path = %d, want 401", resp.StatusCode)
	}
	tampered := cookie.Value[:len(cookie.Value)-2] + "xx"
	if resp, _ := visit("/docs/page", &http.Cookie{Name: "aperio_share", Value: tampered}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a tampered token = %d, want 401", resp.StatusCode)
	}
	if got := servertest.AuditEvents(t, st.Server, "share_created"); len(got) != 1 || strings.Contains(fmt.Sprint(got[0]), u.Query().Get("aperio_share")) {
		t.Fatalf("share_created entries = %v, want one without the token", got)
	}
	// A plain rotation keeps the cookie valid; one that revokes refuses
	// it at the next request.
	servertest.RotateShareKeys(t, st.Server, false)
	if resp, _ := visit("/docs/page", &http.Cookie{Name: "aperio_share", Value: cookie.Value}); resp.StatusCode != http.StatusOK {
		t.Fatalf("the cookie after a plain rotation = %d, want 200", resp.StatusCode)
	}
	servertest.RotateShareKeys(t, st.Server, true)
	if resp, _ := visit("/docs/page", &http.Cookie{Name: "aperio_share", Value: cookie.Value}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the cookie after a rotation with revoke = %d, want 401", resp.StatusCode)
	}
	if got := servertest.AuditEvents(t, st.Server, "share_key_rotated"); len(got) != 2 {
		t.Fatalf("share_key_rotated entries = %v, want 2", got)
	}
}
