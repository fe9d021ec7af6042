package router

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/tunnel"
)

const testKey = "k-0123456789abcdef0123456789abcdef"

var testKeyDigest = func() string {
	d := sha256.Sum256([]byte(testKey))
	return hex.EncodeToString(d[:])
}()

var bcryptCache sync.Map // password → hash: bcrypt is slow even at cost 4

// testBcrypt returns a cheap bcrypt hash of password.
func testBcrypt(t testing.TB, password string) string {
	if h, ok := bcryptCache.Load(password); ok {
		return h.(string)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	bcryptCache.Store(password, string(h))
	return string(h)
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// accessAnn announces one service of app.test with access a.
func accessAnn(a *tunnel.Access) *tunnel.Announcement {
	s := svc("", "app.test")
	s.Access = a
	return ann(s)
}

// lastRequest returns the last request conn received.
func lastRequest(t *testing.T, c *fakeConn) *http.Request {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) == 0 {
		t.Fatal("the backend received no request")
	}
	return c.got[len(c.got)-1]
}

// TestAccessUpstreamIdentity checks what the backend receives after a
// gate admitted the visitor: the user and method, never the credential
// the gate consumed, never a visitor's own identity headers, never the
// server's cookies; and that an open service keeps its Authorization.
func TestAccessUpstreamIdentity(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := newConn("a", 1)
	rt.reg.update(conn, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}))
	req := httptest.NewRequest("GET", "/x", nil)
	req.Host = "app.test"
	req.RemoteAddr = "203.0.113.7:1234"
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("X-Aperio-User", "admin")
	req.Header.Set("X-Aperio-Identity", "forged")
	req.Header.Set("Cookie", "app=1; aperio_session=stolen")
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("bearer request = %d %q, want 200", w.Code, w.Body)
	}
	got := lastRequest(t, conn).Header
	if got.Get("X-Aperio-User") != "ci" || got.Get("X-Aperio-Auth") != "bearer" {
		t.Errorf("backend identity = %q/%q, want ci/bearer", got.Get("X-Aperio-User"), got.Get("X-Aperio-Auth"))
	}
	if got.Get("Authorization") != "" || got.Get("X-Aperio-Identity") != "" {
		t.Errorf("backend got Authorization %q, X-Aperio-Identity %q; want both removed", got.Get("Authorization"), got.Get("X-Aperio-Identity"))
	}
	if c := got.Get("Cookie"); c != "app=1" {
		t.Errorf("backend Cookie = %q, want app=1 (the session cookie removed)", c)
	}

	open := newRouter(t, Config{})
	oc := newConn("b", 1)
	open.reg.update(oc, ann(svc("", "app.test")))
	req = httptest.NewRequest("GET", "/x", nil)
	req.Host = "app.test"
	req.Header.Set("Authorization", "Bearer app-token")
	req.Header.Set("X-Aperio-User", "admin")
	open.ServeHTTP(httptest.NewRecorder(), req)
	got = lastRequest(t, oc).Header
	if got.Get("Authorization") != "Bearer app-token" || got.Get("X-Aperio-User") != "" {
		t.Errorf("open service: Authorization %q, X-Aperio-User %q; want the app's token kept and the forged user removed", got.Get("Authorization"), got.Get("X-Aperio-User"))
	}
}

// TestAccessRefusalAnswer checks the 401's challenge and that a refused
// request never reaches the backend.
func TestAccessRefusalAnswer(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := newConn("a", 1)
	rt.reg.update(conn, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Realm: "staff", Users: map[string]string{"ann": testBcrypt(t, "pw")}}}}))
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	req.Header.Set("Authorization", basicAuth("ann", "wrong"))
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Header().Get("WWW-Authenticate"), `realm="staff"`) {
		t.Fatalf("wrong password = %d, WWW-Authenticate %q; want 401 with realm staff", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	conn.mu.Lock()
	n := len(conn.got)
	conn.mu.Unlock()
	if n != 0 {
		t.Fatalf("backend received %d requests, want 0", n)
	}
}

// TestAccessHiddenLikeUnknownHost checks that a service closed by
// default_access deny answers byte for byte like a hostname nobody
// claimed.
func TestAccessHiddenLikeUnknownHost(t *testing.T) {
	rt := newRouter(t, Config{Access: AccessConfig{Default: access.Deny}})
	rt.reg.update(newConn("a", 1), ann(svc("", "closed.test")))
	answer := func(host string) (int, http.Header, string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		return w.Code, w.Header(), strings.ReplaceAll(w.Body.String(), host, "HOST")
	}
	c1, h1, b1 := answer("closed.test")
	c2, h2, b2 := answer("nobody.test")
	if c1 != c2 || b1 != b2 || len(h1) != len(h2) {
		t.Fatalf("closed service = %d %v %q, unknown host = %d %v %q; want the same", c1, h1, b1, c2, h2, b2)
	}
}

// TestAccessBindAgreement checks the rule for a bind's members: a client
// announcing other access settings for a bind another client serves is
// refused for that bind with a notice, is taken once it agrees, and the
// bind keeps the first client's gate meanwhile.
func TestAccessBindAgreement(t *testing.T) {
	rt := newRouter(t, Config{})
	bearer := &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
	first := newConn("a", 1)
	rt.reg.update(first, accessAnn(bearer))
	second := newConn("b", 2)
	notices := rt.reg.update(second, ann(svc("", "app.test"))) // no access block: open
	if len(notices) != 1 || !strings.Contains(notices[0], "app.test is served by another client with other access settings") {
		t.Fatalf("notices = %q, want the access disagreement", notices)
	}
	p := rt.reg.table.Load().match("app.test", "/")
	if n := len(*p.members.Load()); n != 1 {
		t.Fatalf("members = %d, want 1 (the disagreeing client left out)", n)
	}
	if code := serveOnce(t, rt, "GET", "app.test", "/", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET without a key = %d, want 401: the bind keeps its gate", code)
	}
	// The same announcement again is applied again, not skipped: once the
	// first client leaves, the bind is the second's.
	rt.reg.detach(first)
	if notices := rt.reg.update(second, ann(svc("", "app.test"))); len(notices) != 0 {
		t.Fatalf("notices after the first client left = %q, want none", notices)
	}
	if code := serveOnce(t, rt, "GET", "app.test", "/", ""); code != http.StatusOK {
		t.Fatalf("GET after the open client took the bind = %d, want 200", code)
	}
	// An agreeing client joins.
	third := newConn("c", 3)
	if notices := rt.reg.update(third, ann(svc("", "app.test"))); len(notices) != 0 {
		t.Fatalf("agreeing client's notices = %q, want none", notices)
	}
}

// TestAccessGateBuiltOnce checks that a repeated announcement reuses the
// gate (jwt and forward keep caches in it), and a changed one replaces it.
func TestAccessGateBuiltOnce(t *testing.T) {
	rt := newRouter(t, Config{})
	conn := newConn("a", 1)
	a := &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
	rt.reg.update(conn, accessAnn(a))
	p := rt.reg.table.Load().match("app.test", "/")
	g1 := p.gate.Load()
	again := *a
	rt.reg.update(conn, accessAnn(&again))
	if g2 := p.gate.Load(); g2 != g1 {
		t.Fatal("the same access block rebuilt the gate")
	}
	rt.reg.update(conn, accessAnn(&tunnel.Access{Public: true}))
	if g3 := p.gate.Load(); g3 == g1 || !g3.simple {
		t.Fatalf("a changed access block kept the old gate (simple %v)", g3.simple)
	}
}

// TestAccessBlockRefusedByServer checks that a block the server cannot
// build (jwt without its outbound client, oidc without a provider, a bad
// hash, identity_jwt without a signer) is not routed and the client is
// told why.
func TestAccessBlockRefusedByServer(t *testing.T) {
	tests := []struct {
		name string
		a    *tunnel.Access
		want string
	}{
		{"jwt without outbound client", &tunnel.Access{Auth: tunnel.Auth{JWT: &tunnel.JWTAuth{JWKSURL: "https://idp.test/jwks", Issuer: "i", Audience: []string{"a"}}}}, "outbound client"},
		{"oidc without provider", &tunnel.Access{Auth: tunnel.Auth{OIDC: &tunnel.OIDCAuth{Groups: []string{"ops"}}}}, "no oidc: provider"},
		{"not a hash", &tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"ann": "hunter2"}}}}, "ann"},
		{"bad cidr", &tunnel.Access{AllowedIPs: []string{"10.0.0.0/99"}}, "10.0.0.0/99"},
		{"identity without signer", &tunnel.Access{IdentityJWT: true, Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}, "identity_jwt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newRouter(t, Config{})
			notices := rt.reg.update(newConn("a", 1), accessAnn(tt.a))
			if len(notices) != 1 || !strings.Contains(notices[0], "service 0: access refused") || !strings.Contains(notices[0], tt.want) {
				t.Fatalf("notices = %q, want the service's access refused naming %q", notices, tt.want)
			}
			if code := serveOnce(t, rt, "GET", "app.test", "/", ""); code != http.StatusBadGateway {
				t.Fatalf("GET = %d, want 502: the service is not routed", code)
			}
		})
	}
}

// TestAccessIdentityToken checks that identity_jwt sends the backend a
// token signed by the server's signer.
func TestAccessIdentityToken(t *testing.T) {
	signer, err := access.NewSigner(access.SignerConfig{Issuer: "https://aperio.test"})
	if err != nil {
		t.Fatal(err)
	}
	rt := newRouter(t, Config{Access: AccessConfig{Identity: signer}})
	conn := newConn("a", 1)
	rt.reg.update(conn, accessAnn(&tunnel.Access{IdentityJWT: true, Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}))
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "app.test"
	req.RemoteAddr = netip.AddrPortFrom(visitor, 1).String()
	req.Header.Set("Authorization", "Bearer "+testKey)
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("GET = %d, want 200", w.Code)
	}
	tok := lastRequest(t, conn).Header.Get("X-Aperio-Identity")
	if strings.Count(tok, ".") != 2 {
		t.Fatalf("X-Aperio-Identity = %q, want a JWT", tok)
	}
}

// TestAccessRecordAndDenied checks what a gate's judgement leaves in the
// request's record (metrics labels) and tells the Denied hook: nothing
// for an open service, the admitting method, the gate's methods and the
// outcome of a refusal, and a hidden refusal as status 0.
func TestAccessRecordAndDenied(t *testing.T) {
	var got []AccessDenial
	cfg := Config{Access: AccessConfig{Default: access.Deny, Denied: func(d AccessDenial) { got = append(got, d) }}}
	rt := newRouter(t, cfg)
	rt.reg.update(newConn("a", 1), ann(
		tunnel.Service{Hostnames: []string{"open.test"}, Access: &tunnel.Access{Public: true}},
		tunnel.Service{Hostnames: []string{"closed.test"}},
		tunnel.Service{Hostnames: []string{"app.test"}, Access: &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}},
	))
	serve := func(host, authz string) telemetry.Request {
		req := httptest.NewRequest("GET", "/p", nil)
		req.Host = host
		req.RemoteAddr = "203.0.113.7:1"
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		var rec telemetry.Request
		rt.Proxy(httptest.NewRecorder(), req, &rec)
		return rec
	}
	for _, tc := range []struct {
		host, authz, method, outcome string
	}{
		{"open.test", "", "", ""},
		{"app.test", "Bearer " + testKey, "bearer", "admitted"},
		{"app.test", "Bearer nope-nope-nope-nope", "bearer", "denied"},
		{"closed.test", "", "none", "hidden"},
	} {
		rec := serve(tc.host, tc.authz)
		if rec.AuthMethod != tc.method || rec.AuthOutcome != tc.outcome {
			t.Errorf("%s %q: record %q/%q, want %q/%q", tc.host, tc.authz, rec.AuthMethod, rec.AuthOutcome, tc.method, tc.outcome)
		}
	}
	if len(got) != 2 {
		t.Fatalf("Denied called %d times, want 2: %+v", len(got), got)
	}
	if d := got[0]; d.Host != "app.test" || d.Path != "/p" || d.Status != http.StatusUnauthorized || d.Methods != "bearer" || d.Visitor != visitor || strings.Contains(d.Reason, "nope") {
		t.Errorf("bearer refusal = %+v, want app.test /p 401 bearer from the visitor, no credential", d)
	}
	if d := got[1]; d.Host != "closed.test" || d.Status != 0 || d.Methods != "none" {
		t.Errorf("hidden refusal = %+v, want closed.test, status 0, methods none", d)
	}
}
