package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

const (
	testIssuer = "http://oidc:9400/oidc"
	testAdmin  = "admin-secret-0123456789"
)

func testConfig() config {
	return config{Issuer: testIssuer, ClientID: "aperio-e2e", ClientSecret: "client-secret", AdminSecret: testAdmin}
}

// startProvider serves a provider for testConfig on an httptest server;
// its endpoints still name the issuer's authority (oidc:9400), as in the
// compose network.
func startProvider(t testing.TB) (*provider, *httptest.Server) {
	t.Helper()
	p, err := newProvider(testConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(p.srv.Handler)
	t.Cleanup(ts.Close)
	return p, ts
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*config)
		want string // a substring of the error; "" for none
	}{
		{"ok", func(*config) {}, ""},
		{"no issuer", func(c *config) { c.Issuer = "" }, "OIDC_ISSUER"},
		{"https issuer", func(c *config) { c.Issuer = "https://oidc:9400/oidc" }, "OIDC_ISSUER"},
		{"no port", func(c *config) { c.Issuer = "http://oidc/oidc" }, "OIDC_ISSUER"},
		{"other path", func(c *config) { c.Issuer = "http://oidc:9400/" }, "OIDC_ISSUER"},
		{"userinfo", func(c *config) { c.Issuer = "http://u:p@oidc:9400/oidc" }, "OIDC_ISSUER"},
		{"query", func(c *config) { c.Issuer = "http://oidc:9400/oidc?x=1" }, "OIDC_ISSUER"},
		{"no client id", func(c *config) { c.ClientID = "" }, "OIDC_CLIENT_ID"},
		{"no client secret", func(c *config) { c.ClientSecret = "" }, "OIDC_CLIENT_SECRET"},
		{"short admin secret", func(c *config) { c.AdminSecret = "short" }, "OIDC_ADMIN_SECRET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.edit(&c)
			err := c.validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestDiscoveryNamesIssuer: the servers' discovery must find exactly the
// issuer they were configured with, whatever address the provider
// listens on.
func TestDiscoveryNamesIssuer(t *testing.T) {
	_, ts := startProvider(t)
	resp, err := http.Get(ts.URL + "/oidc/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer string `json:"issuer"`
		Auth   string `json:"authorization_endpoint"`
		Token  string `json:"token_endpoint"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != testIssuer || doc.Auth != testIssuer+"/authorize" || doc.Token != testIssuer+"/token" {
		t.Fatalf("discovery = %+v, want everything under %s", doc, testIssuer)
	}
}

// adminPost sends POST /admin/users with body and auth (the whole
// Authorization header) and returns the status.
func adminPost(t testing.TB, ts *httptest.Server, auth, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/admin/users", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestQueueUserHostile: the admin endpoint refuses a missing or wrong
// secret, a body too large, malformed or with unknown fields, and users
// with fields out of bounds, and queues none of them.
func TestQueueUserHostile(t *testing.T) {
	p, ts := startProvider(t)
	bearer := "Bearer " + testAdmin
	ok := `{"subject":"s1","email":"a@example.com","email_verified":true}`
	tests := []struct {
		name, auth, body string
		want             int
	}{
		{"no auth", "", ok, http.StatusUnauthorized},
		{"wrong secret", "Bearer " + strings.Repeat("x", len(testAdmin)), ok, http.StatusUnauthorized},
		{"secret prefix", "Bearer " + testAdmin[:len(testAdmin)-1], ok, http.StatusUnauthorized},
		{"basic scheme", "Basic " + testAdmin, ok, http.StatusUnauthorized},
		{"too large", bearer, `{"subject":"` + strings.Repeat("a", maxAdminBody) + `"}`, http.StatusRequestEntityTooLarge},
		{"not json", bearer, `subject=s1`, http.StatusBadRequest},
		{"unknown field", bearer, `{"subject":"s1","email":"a@example.com","admin":true}`, http.StatusBadRequest},
		{"two objects", bearer, ok + ok, http.StatusBadRequest},
		{"no subject", bearer, `{"email":"a@example.com"}`, http.StatusBadRequest},
		{"no email", bearer, `{"subject":"s1"}`, http.StatusBadRequest},
		{"long email", bearer, `{"subject":"s1","email":"` + strings.Repeat("a", maxField) + `@x"}`, http.StatusBadRequest},
		{"control character", bearer, `{"subject":"s\n1","email":"a@example.com"}`, http.StatusBadRequest},
		{"too many groups", bearer, `{"subject":"s1","email":"a@example.com","groups":[` + strings.Repeat(`"g",`, maxGroups) + `"g"]}`, http.StatusBadRequest},
		{"empty group", bearer, `{"subject":"s1","email":"a@example.com","groups":[""]}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := adminPost(t, ts, tt.auth, tt.body); got != tt.want {
				t.Fatalf("POST /admin/users = %d, want %d", got, tt.want)
			}
		})
	}
	p.mu.Lock()
	n := len(p.m.UserQueue.Queue)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("users queued after refused requests = %d, want 0", n)
	}
	// GET is not a route.
	resp, err := ts.Client().Get(ts.URL + "/admin/users")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /admin/users = %d, want 405", resp.StatusCode)
	}
}

// TestQueueUserBounded: at most maxQueued users wait; one more is 429.
func TestQueueUserBounded(t *testing.T) {
	_, ts := startProvider(t)
	body := `{"subject":"s1","email":"a@example.com","email_verified":true}`
	for i := range maxQueued {
		if got := adminPost(t, ts, "Bearer "+testAdmin, body); got != http.StatusNoContent {
			t.Fatalf("queue user %d = %d, want 204", i, got)
		}
	}
	if got := adminPost(t, ts, "Bearer "+testAdmin, body); got != http.StatusTooManyRequests {
		t.Fatalf("queue user %d = %d, want 429", maxQueued, got)
	}
}

// login runs an authorization and the code exchange as a relying party
// would, and returns the ID token's claims.
func login(t testing.TB, ts *httptest.Server) map[string]any {
	t.Helper()
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	q := url.Values{
		"client_id": {"aperio-e2e"}, "response_type": {"code"}, "scope": {"openid email"},
		"state": {"st"}, "nonce": {"n0"}, "redirect_uri": {"http://app.test/cb"},
	}
	resp, err := c.Get(ts.URL + "/oidc/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || loc.Query().Get("state") != "st" {
		t.Fatalf("authorize = %d Location %q, want 302 to the redirect_uri with the state", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = c.PostForm(ts.URL+"/oidc/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")},
		"client_id": {"aperio-e2e"}, "client_secret": {"client-secret"}, "redirect_uri": {"http://app.test/cb"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		IDToken string `json:"id_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("token = %d %v, want 200 with an id_token", resp.StatusCode, err)
	}
	parts := strings.Split(tok.IDToken, ".")
	if len(parts) != 3 {
		t.Fatalf("id_token %q is not a JWS", tok.IDToken)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}

// TestQueuedUserLogsIn: the user queued through the admin endpoint is the
// one the next login returns, then the default user again.
func TestQueuedUserLogsIn(t *testing.T) {
	_, ts := startProvider(t)
	if got := adminPost(t, ts, "Bearer "+testAdmin, `{"subject":"u-42","email":"someone@else.test","email_verified":true,"groups":["ops"]}`); got != http.StatusNoContent {
		t.Fatalf("queue user = %d, want 204", got)
	}
	c := login(t, ts)
	if c["sub"] != "u-42" || c["email"] != "someone@else.test" || c["email_verified"] != true || c["iss"] != testIssuer || fmt.Sprint(c["aud"]) != "[aperio-e2e]" || c["nonce"] != "n0" {
		t.Fatalf("claims of the queued user's login = %v", c)
	}
	if c := login(t, ts); c["email"] != "jane.doe@example.com" {
		t.Fatalf("claims of the next login = %v, want the default user jane.doe@example.com", c)
	}
}

// TestSessionsBounded: mockoidc remembers at most maxSessions logins.
func TestSessionsBounded(t *testing.T) {
	p, ts := startProvider(t)
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	q := url.Values{"client_id": {"aperio-e2e"}, "response_type": {"code"}, "scope": {"openid"}, "state": {"st"}, "redirect_uri": {"http://app.test/cb"}}
	for i := range maxSessions + 10 {
		resp, err := c.Get(ts.URL + "/oidc/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("authorize %d = %d, want 302", i, resp.StatusCode)
		}
	}
	p.mu.Lock()
	n := len(p.m.SessionStore.Store)
	p.mu.Unlock()
	if n > maxSessions {
		t.Fatalf("logins remembered = %d, want at most %d", n, maxSessions)
	}
}
