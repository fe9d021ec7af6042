package oidc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
)

// clock is a fake clock: real time plus an offset the test advances, so
// that the provider's tokens (stamped with real time) verify until the
// test moves past them.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// harness is a real OpenID Connect provider (mockoidc on loopback) and an
// app server whose every hostname under .test is protected by a Provider
// the way the server wires it: /aperio/auth/* to ServeAuth, the rest
// through Gate.
type harness struct {
	t        testing.TB
	op       *oidctest.Provider
	p        *Provider
	app      *httptest.Server
	port     string
	clock    *clock
	policies map[string]*Policy // by host; fixed before the first request
	secure   bool               // the app is served over TLS
}

// setup says how a harness differs from the default: per-host policies,
// a change to the Provider's Config, an app served over TLS.
type setup struct {
	policies map[string]*Policy
	edit     func(*Config)
	secure   bool
}

func newHarness(t testing.TB, su setup) *harness {
	t.Helper()
	h := &harness{t: t, clock: &clock{}, policies: su.policies, secure: su.secure}
	op := oidctest.Start(t)
	h.op = op

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := Config{
		Issuer:       op.Issuer(),
		ClientID:     op.ClientID,
		ClientSecret: op.ClientSecret,
		HTTPClient:   &http.Client{Transport: tr},
		Keys:         []Key{{ID: 1, Secret: []byte(strings.Repeat("k", 32))}},
		AllowHTTP:    true,
		Now:          h.clock.Now,
	}
	if su.edit != nil {
		su.edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.p = p

	h.app = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostname.Normalize(r.Host)
		v := Visit{Host: host, Secure: r.TLS != nil, Policy: h.policies[host]}
		if strings.HasPrefix(r.URL.Path, AuthPrefix) {
			h.p.ServeAuth(w, r, v)
			return
		}
		s, ok := h.p.Gate(w, r, v)
		if !ok {
			return
		}
		fmt.Fprintf(w, "hello %s at %s", s.User(), r.URL.RequestURI())
	}))
	if su.secure {
		h.app.StartTLS()
	} else {
		h.app.Start()
	}
	t.Cleanup(h.app.Close)
	_, h.port, err = net.SplitHostPort(h.app.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// url returns the app's URL for path on host (a name under .test).
func (h *harness) url(host, path string) string {
	if h.secure {
		return "https://" + host + ":" + h.port + path
	}
	return "http://" + host + ":" + h.port + path
}

// browser returns a cookie-jar client that reaches every .test host at
// the app server and the provider on loopback, and nothing else: a
// redirect anywhere else fails the request instead of leaving the
// machine. follow false stops at each redirect.
func (h *harness) browser(follow bool) *http.Client {
	h.t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	appAddr := h.app.Listener.Addr().String()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			var d net.Dialer
			switch {
			case strings.HasSuffix(host, ".test"):
				return d.DialContext(ctx, network, appAddr)
			case host == "127.0.0.1":
				return d.DialContext(ctx, network, addr)
			}
			return nil, fmt.Errorf("test browser: refusing to dial %s", addr)
		},
	}
	if h.secure {
		// httptest's certificate names example.com; every .test host
		// is the app.
		tr.TLSClientConfig = h.app.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com"
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Jar:       jar,
		Transport: tr,
		Timeout:   10 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if !follow {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return fmt.Errorf("test browser: %d redirects", len(via))
			}
			return nil
		},
	}
}

type answer struct {
	status   int
	body     string
	url      *url.URL // the URL that answered, after redirects
	location string
	header   http.Header
}

// do sends method to rawURL with an HTML Accept header (html true) and
// form as the body of a POST.
func (h *harness) do(c *http.Client, method, rawURL string, html bool, form url.Values) answer {
	h.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if html {
		req.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8")
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: string(b), url: resp.Request.URL, location: resp.Header.Get("Location"), header: resp.Header}
}

func (h *harness) get(c *http.Client, rawURL string) answer {
	h.t.Helper()
	return h.do(c, http.MethodGet, rawURL, true, nil)
}

// cookie returns the value of the jar's cookie name for host, or "".
func (h *harness) cookie(c *http.Client, host, name string) string {
	h.t.Helper()
	u, err := url.Parse(h.url(host, "/"))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// toCallback walks a non-following browser from the app to the provider
// and back to the moment before the callback, and returns the callback
// URL the provider sent the visitor to. mutate, if set, may change the
// authorization URL first (as a hostile visitor could).
func (h *harness) toCallback(c *http.Client, path string, mutate func(url.Values)) string {
	h.t.Helper()
	a := h.get(c, h.url("app.test", path))
	if a.status != http.StatusFound || !strings.HasPrefix(a.location, h.op.AuthorizationEndpoint()) {
		h.t.Fatalf("GET %s = %d Location %q, want 302 to the provider", path, a.status, a.location)
	}
	if mutate != nil {
		u, err := url.Parse(a.location)
		if err != nil {
			h.t.Fatal(err)
		}
		q := u.Query()
		mutate(q)
		u.RawQuery = q.Encode()
		a.location = u.String()
	}
	b := h.get(c, a.location)
	want := h.url("app.test", CallbackPath) + "?"
	if b.status != http.StatusFound || !strings.HasPrefix(b.location, want) {
		h.t.Fatalf("provider answered %d Location %q, want 302 to %s", b.status, b.location, want)
	}
	return b.location
}

func TestLoginFlow(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(true)

	a := h.get(c, h.url("app.test", "/docs/page?q=1"))
	if a.status != http.StatusOK || a.body != "hello jane.doe@example.com at /docs/page?q=1" {
		t.Fatalf("first visit = %d %q, want 200 from the app for jane at the original URL", a.status, a.body)
	}
	if a.url.Host != "app.test:"+h.port {
		t.Errorf("landed on %s, want app.test", a.url)
	}
	if got := h.op.Authorizations(); got != 1 {
		t.Errorf("provider saw %d authorizations, want 1", got)
	}
	if h.cookie(c, "app.test", SessionCookie) == "" {
		t.Errorf("no %s cookie after login", SessionCookie)
	}
	if v := h.cookie(c, "app.test", LoginCookie); v != "" {
		t.Errorf("login cookie still set after the callback: %q", v)
	}

	// The session now carries the visitor without the provider, browser
	// or not.
	if a := h.get(c, h.url("app.test", "/again")); a.status != http.StatusOK || a.body != "hello jane.doe@example.com at /again" {
		t.Errorf("second visit = %d %q, want 200 for jane", a.status, a.body)
	}
	if a := h.do(c, http.MethodPost, h.url("app.test", "/api"), false, url.Values{"x": {"1"}}); a.status != http.StatusOK {
		t.Errorf("POST with session = %d %q, want 200", a.status, a.body)
	}
	if got := h.op.Authorizations(); got != 1 {
		t.Errorf("provider saw %d authorizations after the session was set, want 1", got)
	}
}

func TestNonBrowserGets401(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(false)
	for _, tc := range []struct {
		name   string
		method string
		html   bool
	}{
		{"GET without Accept html", http.MethodGet, false},
		{"POST accepting html", http.MethodPost, true},
		{"DELETE", http.MethodDelete, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h.do(c, tc.method, h.url("app.test", "/api/items"), tc.html, nil)
			if a.status != http.StatusUnauthorized || a.location != "" {
				t.Errorf("%s = %d Location %q, want 401 without a redirect", tc.method, a.status, a.location)
			}
		})
	}
	if got := h.op.Authorizations(); got != 0 {
		t.Errorf("provider saw %d authorizations, want 0", got)
	}
}

func TestPolicyDecidesLogin(t *testing.T) {
	jane := mockoidc.DefaultUser() // jane.doe@example.com, verified, groups engineering and design
	unverified := *jane
	unverified.EmailVerified = false
	mallory := &mockoidc.MockUser{Subject: "666", Email: "mallory@evil.example", EmailVerified: true, Groups: []string{"ops"}}
	for _, tc := range []struct {
		name   string
		policy Policy
		user   mockoidc.User
		want   int
	}{
		{"email allowed", Policy{AllowedEmails: []string{"Jane.Doe@example.com"}}, jane, http.StatusOK},
		{"email not allowed", Policy{AllowedEmails: []string{"jane.doe@example.com"}}, mallory, http.StatusForbidden},
		{"unverified email refused", Policy{AllowedEmails: []string{"jane.doe@example.com"}}, &unverified, http.StatusForbidden},
		{"domain allowed", Policy{AllowedDomains: []string{"example.com"}}, jane, http.StatusOK},
		{"domain not allowed", Policy{AllowedDomains: []string{"example.com"}}, mallory, http.StatusForbidden},
		{"group allowed", Policy{Groups: []string{"design"}}, jane, http.StatusOK},
		{"group not allowed", Policy{Groups: []string{"design"}}, mallory, http.StatusForbidden},
		{"open policy", Policy{}, mallory, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.policy
			h := newHarness(t, setup{policies: map[string]*Policy{"app.test": &pol}, edit: func(c *Config) {
				c.Scopes = []string{"openid", "email", "groups"}
			}})
			h.op.QueueUser(tc.user)
			c := h.browser(true)
			a := h.get(c, h.url("app.test", "/"))
			if a.status != tc.want {
				t.Fatalf("login = %d %q, want %d", a.status, a.body, tc.want)
			}
			got := h.cookie(c, "app.test", SessionCookie)
			if (got != "") != (tc.want == http.StatusOK) {
				t.Errorf("session cookie %q after a %d login", got, a.status)
			}
		})
	}
}

func TestCodeReplayRefused(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(false)
	cb := h.toCallback(c, "/private", nil)
	loginCookie := h.cookie(c, "app.test", LoginCookie)
	if loginCookie == "" {
		t.Fatal("no login cookie before the callback")
	}
	if a := h.get(c, cb); a.status != http.StatusFound || a.location != "/private" {
		t.Fatalf("callback = %d Location %q, want 302 to /private", a.status, a.location)
	}

	// The same browser replays the callback: its login is spent.
	if a := h.get(c, cb); a.status != http.StatusBadRequest {
		t.Errorf("replayed callback = %d %q, want 400", a.status, a.body)
	}
	// A thief with the callback URL and the login cookie: the provider
	// refuses a code already exchanged.
	thief := h.browser(false)
	u, err := url.Parse(h.url("app.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	thief.Jar.SetCookies(u, []*http.Cookie{{Name: LoginCookie, Value: loginCookie}})
	if a := h.get(thief, cb); a.status != http.StatusUnauthorized {
		t.Errorf("callback replayed with the login cookie = %d %q, want 401", a.status, a.body)
	}
	if h.cookie(thief, "app.test", SessionCookie) != "" {
		t.Error("a replayed code got a session")
	}
}

// TestCallbackRefusals drives logins whose answer from the provider was
// tampered with or came too late: each is refused with its status, sets
// no session, and spends the login (the genuine callback fails after it).
func TestCallbackRefusals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(*Config)
		authorize func(url.Values) // the authorization request, as a hostile visitor could change it
		callback  func(url.Values) // the provider's answer, likewise
		advance   time.Duration    // time between the provider's answer and the callback
		want      int
	}{
		{name: "state mismatch", callback: func(q url.Values) { q.Set("state", "attacker-state") }, want: http.StatusBadRequest},
		{name: "state missing", callback: func(q url.Values) { q.Del("state") }, want: http.StatusBadRequest},
		{name: "code missing", callback: func(q url.Values) { q.Del("code") }, want: http.StatusBadRequest},
		{name: "code unknown to the provider", callback: func(q url.Values) { q.Set("code", "forged") }, want: http.StatusUnauthorized},
		{name: "provider error", callback: func(q url.Values) { q.Del("code"); q.Set("error", "access_denied") }, want: http.StatusUnauthorized},
		// Only the provider knows the state: a forged error cannot end
		// someone's login.
		{name: "provider error, forged state", callback: func(q url.Values) { q.Del("code"); q.Set("error", "access_denied"); q.Set("state", "x") }, want: http.StatusBadRequest},
		{name: "nonce of another login", authorize: func(q url.Values) { q.Set("nonce", "attacker-nonce") }, want: http.StatusUnauthorized},
		// A challenge the server's verifier does not hash to: the
		// provider refuses the exchange.
		{name: "PKCE challenge of another verifier", authorize: func(q url.Values) { q.Set("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM") }, want: http.StatusUnauthorized},
		{name: "ID token expired", edit: func(c *Config) { c.LoginTTL = time.Hour }, advance: 11 * time.Minute, want: http.StatusUnauthorized},
		{name: "login expired", advance: DefaultLoginTTL + time.Second, want: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, setup{edit: tc.edit})
			c := h.browser(false)
			cb := h.toCallback(c, "/", tc.authorize)
			h.clock.Advance(tc.advance)
			sent := cb
			if tc.callback != nil {
				u, err := url.Parse(cb)
				if err != nil {
					t.Fatal(err)
				}
				q := u.Query()
				tc.callback(q)
				u.RawQuery = q.Encode()
				sent = u.String()
			}
			if a := h.get(c, sent); a.status != tc.want {
				t.Fatalf("callback = %d %q, want %d", a.status, a.body, tc.want)
			}
			if h.cookie(c, "app.test", SessionCookie) != "" {
				t.Fatal("a refused callback set a session")
			}
			if a := h.get(c, cb); a.status != http.StatusBadRequest {
				t.Errorf("genuine callback after a refused one = %d %q, want 400", a.status, a.body)
			}
		})
	}
}

func TestExpiredSessionRedirectsAgain(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(true)
	if a := h.get(c, h.url("app.test", "/")); a.status != http.StatusOK {
		t.Fatalf("login = %d %q", a.status, a.body)
	}
	h.clock.Advance(DefaultSessionTTL - time.Minute)
	nf := &http.Client{Jar: c.Jar, Transport: c.Transport, Timeout: c.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if a := h.get(nf, h.url("app.test", "/late")); a.status != http.StatusOK {
		t.Fatalf("a minute before expiry = %d %q, want 200", a.status, a.body)
	}
	h.clock.Advance(2 * time.Minute)
	a := h.get(nf, h.url("app.test", "/late"))
	if a.status != http.StatusFound || !strings.HasPrefix(a.location, h.op.AuthorizationEndpoint()) {
		t.Fatalf("after expiry = %d Location %q, want 302 to the provider", a.status, a.location)
	}
	if h.cookie(nf, "app.test", SessionCookie) != "" {
		t.Error("the expired session cookie was not cleared")
	}
}

func TestSessionBoundToHost(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(true)
	if a := h.get(c, h.url("app.test", "/")); a.status != http.StatusOK {
		t.Fatalf("login = %d %q", a.status, a.body)
	}
	stolen := h.cookie(c, "app.test", SessionCookie)
	other := h.browser(false)
	u, err := url.Parse(h.url("other.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	other.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: stolen}})
	if a := h.get(other, h.url("other.test", "/")); a.status != http.StatusFound || !strings.HasPrefix(a.location, h.op.AuthorizationEndpoint()) {
		t.Errorf("app.test's session on other.test = %d Location %q, want 302 to the provider", a.status, a.location)
	}
	if a := h.do(other, http.MethodGet, h.url("other.test", "/"), false, nil); a.status != http.StatusUnauthorized {
		t.Errorf("app.test's session on other.test (not a browser) = %d, want 401", a.status)
	}
}

func TestOpenRedirectNeutralized(t *testing.T) {
	h := newHarness(t, setup{})
	for _, tc := range []struct{ redirect, want string }{
		{"/ok/path?x=1", "/ok/path?x=1"},
		{"//evil.example/", "/"},
		{"https://evil.example/", "/"},
		{"http:evil.example", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/%2F%2Fevil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"evil.example", "/"},
		{"/a\r\nSet-Cookie: x=y", "/"},
		{"", "/"},
	} {
		t.Run(tc.redirect, func(t *testing.T) {
			c := h.browser(true)
			a := h.get(c, h.url("app.test", LoginPath+"?redirect="+url.QueryEscape(tc.redirect)))
			if a.status != http.StatusOK || a.url.Host != "app.test:"+h.port || a.url.RequestURI() != tc.want {
				t.Errorf("login with redirect %q landed on %s (%d), want app.test%s", tc.redirect, a.url, a.status, tc.want)
			}
		})
	}
}

func TestLogoutNeedsCSRFToken(t *testing.T) {
	h := newHarness(t, setup{})
	c := h.browser(false)
	follow := h.browser(true)
	follow.Jar = c.Jar
	if a := h.get(follow, h.url("app.test", "/")); a.status != http.StatusOK {
		t.Fatalf("login = %d %q", a.status, a.body)
	}
	stillIn := func(when string) {
		t.Helper()
		if a := h.get(c, h.url("app.test", "/")); a.status != http.StatusOK {
			t.Fatalf("%s: app = %d, want 200 (still signed in)", when, a.status)
		}
	}
	logout := h.url("app.test", LogoutPath)

	if a := h.do(c, http.MethodPost, logout, true, url.Values{}); a.status != http.StatusForbidden {
		t.Errorf("POST logout without a token = %d, want 403", a.status)
	}
	stillIn("after a POST without token")
	if a := h.do(c, http.MethodPost, logout, true, url.Values{CSRFField: {"AAAAAAAAAAAAAAAAAAAAAA"}}); a.status != http.StatusForbidden {
		t.Errorf("POST logout with a wrong token = %d, want 403", a.status)
	}
	stillIn("after a POST with a wrong token")

	page := h.get(c, logout)
	if page.status != http.StatusOK || page.header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("GET logout = %d X-Frame-Options %q, want 200 and DENY", page.status, page.header.Get("X-Frame-Options"))
	}
	stillIn("after GET logout")
	_, rest, ok := strings.Cut(page.body, `name="`+CSRFField+`" value="`)
	token, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 || token == "" {
		t.Fatalf("logout page carries no token: %q", page.body)
	}

	// The token alone, without the session it belongs to, is refused.
	if a := h.do(h.browser(false), http.MethodPost, logout, true, url.Values{CSRFField: {token}}); a.status != http.StatusForbidden {
		t.Errorf("POST logout with the token but no session = %d, want 403", a.status)
	}
	stillIn("after a POST from another browser")

	req, err := http.NewRequest(http.MethodPost, logout, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(CSRFHeader, "AAAAAAAAAAAAAAAAAAAAAA")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST logout with a wrong %s header = %d, want 403", CSRFHeader, resp.StatusCode)
	}
	stillIn("after a POST with a wrong header")

	if a := h.do(c, http.MethodPost, logout, true, url.Values{CSRFField: {token}}); a.status != http.StatusOK {
		t.Fatalf("POST logout with the token = %d %q, want 200", a.status, a.body)
	}
	if h.cookie(c, "app.test", SessionCookie) != "" {
		t.Error("session cookie kept after logout")
	}
	if a := h.get(c, h.url("app.test", "/")); a.status != http.StatusFound {
		t.Errorf("app after logout = %d, want 302 to the provider", a.status)
	}
}

// setCookie returns the Set-Cookie of a named name, or fails.
func setCookie(t testing.TB, a answer, name string) *http.Cookie {
	t.Helper()
	for _, line := range a.header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == name {
			return c
		}
	}
	t.Fatalf("no Set-Cookie %s in %q", name, a.header.Values("Set-Cookie"))
	return nil
}

func TestSecureLoginFlow(t *testing.T) {
	h := newHarness(t, setup{secure: true})
	c := h.browser(false)

	a := h.get(c, h.url("app.test", "/secret"))
	if a.status != http.StatusFound || !strings.HasPrefix(a.location, h.op.AuthorizationEndpoint()) {
		t.Fatalf("GET = %d Location %q, want 302 to the provider", a.status, a.location)
	}
	u, err := url.Parse(a.location)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if got, want := q.Get("redirect_uri"), h.url("app.test", CallbackPath); got != want {
		t.Errorf("redirect_uri = %q, want %q (the visited host, https)", got, want)
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" {
		t.Errorf("authorization request %v lacks S256 PKCE, nonce or state", q)
	}
	lc := setCookie(t, a, SecureLoginCookie)
	if !lc.Secure || !lc.HttpOnly || lc.SameSite != http.SameSiteLaxMode || lc.Path != "/" || lc.MaxAge != int(DefaultLoginTTL/time.Second) {
		t.Errorf("login cookie %s, want Secure, HttpOnly, SameSite=Lax, Path=/, Max-Age=600", lc)
	}

	b := h.get(c, a.location)
	if b.status != http.StatusFound || !strings.HasPrefix(b.location, h.url("app.test", CallbackPath)+"?") {
		t.Fatalf("provider = %d Location %q, want 302 to the callback", b.status, b.location)
	}
	cb := h.get(c, b.location)
	if cb.status != http.StatusFound || cb.location != "/secret" {
		t.Fatalf("callback = %d Location %q, want 302 to /secret", cb.status, cb.location)
	}
	sc := setCookie(t, cb, SecureSessionCookie)
	if !sc.Secure || !sc.HttpOnly || sc.SameSite != http.SameSiteLaxMode || sc.Path != "/" || sc.Domain != "" || sc.MaxAge != int(DefaultSessionTTL/time.Second) {
		t.Errorf("session cookie %s, want Secure, HttpOnly, SameSite=Lax, Path=/, no Domain, Max-Age=86400", sc)
	}
	if a := h.get(c, h.url("app.test", "/secret")); a.status != http.StatusOK || a.body != "hello jane.doe@example.com at /secret" {
		t.Errorf("app with the secure session = %d %q, want 200", a.status, a.body)
	}
}

// oddUser is a provider user whose ID token claims take the shapes some
// providers send: email_verified as a string, groups as one string, or
// shapes nobody should send.
type oddUser struct {
	emailVerified any
	groups        any
}

type oddClaims struct {
	*mockoidc.IDTokenClaims
	Email         string `json:"email"`
	EmailVerified any    `json:"email_verified,omitempty"`
	Groups        any    `json:"groups,omitempty"`
}

func (u oddUser) ID() string                        { return "odd" }
func (u oddUser) Userinfo([]string) ([]byte, error) { return []byte(`{"sub":"odd"}`), nil }
func (u oddUser) Claims(_ []string, base *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	return &oddClaims{IDTokenClaims: base, Email: "odd@example.com", EmailVerified: u.emailVerified, Groups: u.groups}, nil
}

func TestClaimShapes(t *testing.T) {
	byEmail := &Policy{AllowedEmails: []string{"odd@example.com"}}
	byGroup := &Policy{Groups: []string{"design"}}
	for _, tc := range []struct {
		name   string
		user   oddUser
		policy *Policy
		want   int
	}{
		{"email_verified as the string true", oddUser{emailVerified: "true"}, byEmail, http.StatusOK},
		{"email_verified as the string false", oddUser{emailVerified: "false"}, byEmail, http.StatusForbidden},
		{"email_verified absent", oddUser{}, byEmail, http.StatusForbidden},
		{"email_verified a number", oddUser{emailVerified: 1}, byEmail, http.StatusUnauthorized},
		{"groups as one string", oddUser{groups: "design"}, byGroup, http.StatusOK},
		{"groups a number", oddUser{groups: 7}, byGroup, http.StatusUnauthorized},
		{"groups with a number", oddUser{groups: []any{"design", 7}}, byGroup, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, setup{policies: map[string]*Policy{"app.test": tc.policy}})
			h.op.QueueUser(tc.user)
			if a := h.get(h.browser(true), h.url("app.test", "/")); a.status != tc.want {
				t.Errorf("login = %d %q, want %d", a.status, a.body, tc.want)
			}
		})
	}
}
