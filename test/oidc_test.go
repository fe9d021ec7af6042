//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The OIDC login's side of the topology (test/docker-compose.yml): the
// provider as the servers reach it, the protected app, and what the
// servers call things on the wire.
const (
	secureHost    = "secure.e2e.test"
	oidcAuthority = "oidc:9400" // the provider inside the compose network
	oidcClientID  = "aperio-e2e"
	janeEmail     = "jane.doe@example.com" // the one address secure-client.yaml admits
	sessionCookie = "aperio_session"       // over plain http: no __Host- prefix
	loginCookie   = "aperio_login"
	forgedUser    = "mallory@evil.test"
	callbackURL   = "http://" + secureHost + "/aperio/auth/callback"
)

var servers = []string{"server-a", "server-b"}

// oidcUser is the body of the test provider's POST /admin/users.
type oidcUser struct {
	Subject       string `json:"subject"`
	Email         string `json:"email"`
	EmailVerified bool   `json:"email_verified"`
}

// queueOIDCUser makes u the user the provider's next login returns.
func (tp *topology) queueOIDCUser(u oidcUser) {
	t := tp.t
	t.Helper()
	body, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+tp.port("oidc", 9400)+"/admin/users", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tp.oidc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("queue OIDC user %s: %v", u.Email, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		t.Fatalf("queue OIDC user %s = %d %q (%v), want 204", u.Email, resp.StatusCode, b, err)
	}
}

// browser is a visitor outside the compose network: one cookie jar, and a
// client per server that follows no redirect, so that the test checks
// every hop itself. It dials a name under .e2e.test at the server's
// published port and the provider's authority at the provider's, so that
// URLs, Host headers and cookies keep the names the servers and the
// provider use inside the network.
type browser struct {
	t   *testing.T
	jar *cookiejar.Jar
	via map[string]*http.Client // by server (compose service)
}

func (tp *topology) newBrowser() *browser {
	t := tp.t
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, jar: jar, via: map[string]*http.Client{}}
	provider := tp.port("oidc", 9400)
	for _, s := range servers {
		server := tp.port(s, 8080)
		tr := &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			switch {
			case err != nil:
				return nil, err
			case addr == oidcAuthority:
				addr = provider
			case strings.HasSuffix(host, ".e2e.test"):
				addr = server
			default:
				return nil, fmt.Errorf("browser: %s is not in the topology", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
		t.Cleanup(tr.CloseIdleConnections)
		b.via[s] = &http.Client{
			Transport:     tr,
			Jar:           jar,
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return b
}

// do sends req through server, with the jar unless bare, and returns the
// answer with its body read.
func (b *browser) do(server string, req *http.Request, bare bool) (*http.Response, string) {
	b.t.Helper()
	c := b.via[server]
	if bare {
		cc := *c
		cc.Jar = nil
		c = &cc
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s via %s: %v", req.Method, req.URL, server, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		b.t.Fatalf("%s %s via %s: read body: %v", req.Method, req.URL, server, err)
	}
	b.t.Logf("%s %s%s via %s: %d in %v", req.Method, req.URL.Host, req.URL.Path, server, resp.StatusCode, time.Since(start).Round(time.Millisecond))
	return resp, string(body)
}

// get sends a navigation (Accept: text/html) to rawURL through server,
// claiming to be forgedUser: the servers must replace that header.
func (b *browser) get(server, rawURL string) (*http.Response, string) {
	b.t.Helper()
	return b.do(server, b.request(http.MethodGet, rawURL, nil), false)
}

func (b *browser) request(method, rawURL string, body io.Reader) *http.Request {
	b.t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	req.Header.Set("X-Aperio-User", forgedUser)
	req.Header.Set("X-Aperio-Auth", "forged")
	return req
}

// cookie returns the value of the jar's cookie name for secureHost, ""
// when there is none.
func (b *browser) cookie(name string) string {
	for _, c := range b.jar.Cookies(&url.URL{Scheme: "http", Host: secureHost, Path: "/"}) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// location returns where a redirect goes, resolved against its request.
func location(t *testing.T, what string, resp *http.Response) *url.URL {
	t.Helper()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("%s = %d, want 302", what, resp.StatusCode)
	}
	u, err := resp.Location()
	if err != nil {
		t.Fatalf("%s: Location %q: %v", what, resp.Header.Get("Location"), err)
	}
	return u
}

// checkToProvider fails unless resp sends the browser to the provider's
// authorization endpoint with a PKCE S256 challenge, a state, a nonce and
// the callback on secureHost; it returns that URL.
func checkToProvider(t *testing.T, what string, resp *http.Response) *url.URL {
	t.Helper()
	u := location(t, what, resp)
	q := u.Query()
	if u.Scheme != "http" || u.Host != oidcAuthority || u.Path != "/oidc/authorize" {
		t.Fatalf("%s: redirect to %s, want http://%s/oidc/authorize", what, u, oidcAuthority)
	}
	for k, want := range map[string]string{"client_id": oidcClientID, "response_type": "code", "code_challenge_method": "S256", "redirect_uri": callbackURL} {
		if got := q.Get(k); got != want {
			t.Errorf("%s: %s = %q, want %q (in %s)", what, k, got, want, u)
		}
	}
	// S256: the base64url of a SHA-256, 43 characters unpadded.
	if c := q.Get("code_challenge"); len(c) != 43 {
		t.Errorf("%s: code_challenge %q, want a 43-character S256 challenge", what, c)
	}
	if len(q.Get("state")) < 16 || len(q.Get("nonce")) < 16 {
		t.Errorf("%s: state %q nonce %q, want both random", what, q.Get("state"), q.Get("nonce"))
	}
	if !strings.Contains(" "+q.Get("scope")+" ", " openid ") {
		t.Errorf("%s: scope %q, want openid in it", what, q.Get("scope"))
	}
	if t.Failed() {
		t.FailNow()
	}
	return u
}

// login runs a login through server hop by hop, from a GET of path on
// secureHost without a session: the server's redirect to the provider,
// the provider's back to the callback with the same state, and the
// callback, whose answer it returns.
func (b *browser) login(server, path string) (*http.Response, string) {
	t := b.t
	t.Helper()
	resp, _ := b.get(server, "http://"+secureHost+path)
	auth := checkToProvider(t, "GET "+path+" without a session via "+server, resp)
	q := auth.Query()
	if b.cookie(loginCookie) == "" {
		t.Fatalf("redirect to the provider set no %s cookie", loginCookie)
	}
	resp, _ = b.get(server, auth.String())
	back := location(t, "the provider's authorization", resp)
	if got := back.Scheme + "://" + back.Host + back.Path; got != callbackURL || back.Query().Get("state") != q.Get("state") || back.Query().Get("code") == "" {
		t.Fatalf("the provider sent the browser to %s, want %s with a code and state %q", back, callbackURL, q.Get("state"))
	}
	return b.get(server, back.String())
}

// appHeaders GETs /headers?from=PATH on secureHost through server and
// returns the headers the app saw; the answer must be 200.
func (b *browser) appHeaders(server, from string) http.Header {
	t := b.t
	t.Helper()
	resp, body := b.get(server, "http://"+secureHost+"/headers?from="+from)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /headers via %s with the session = %d %q, want 200", server, resp.StatusCode, body)
	}
	var h http.Header
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("GET /headers via %s: %q: %v", server, body, err)
	}
	return h
}

// checkIdentity fails unless the app saw Jane logged in by oidc, and
// neither the forged identity nor the session cookie.
func checkIdentity(t *testing.T, server string, h http.Header) {
	t.Helper()
	if got := h.Values("X-Aperio-User"); len(got) != 1 || got[0] != janeEmail {
		t.Errorf("via %s the app saw X-Aperio-User %q, want exactly [%s] (the visitor sent %s)", server, got, janeEmail, forgedUser)
	}
	if got := h.Values("X-Aperio-Auth"); len(got) != 1 || got[0] != "oidc" {
		t.Errorf("via %s the app saw X-Aperio-Auth %q, want exactly [oidc]", server, got)
	}
	if c := h.Get("Cookie"); strings.Contains(c, "aperio_") {
		t.Errorf("via %s the app saw Cookie %q, want the login cookies removed", server, c)
	}
}

// tamper changes one character in the middle of a sealed value.
func tamper(v string) string {
	b := []byte(v)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// oidcLogin is the oidc_login step: the OIDC browser login through both
// servers, against the test provider, as a browser does it.
func (tp *topology) oidcLogin(t *testing.T, figs *figures) {
	for _, s := range servers {
		tp.waitFor(s+" lists the secure app's client", 60*time.Second, func() bool {
			cs := tp.clientsOf(s, secureHost)
			return len(cs) == 1 && cs[0].Healthy
		})
	}
	start := time.Now()
	tp.queueOIDCUser(oidcUser{Subject: "e2e-jane", Email: janeEmail, EmailVerified: true})
	b := tp.newBrowser() // docker-compose port: seconds on a loaded host
	loginStart := time.Now()
	resp, body := b.login("server-a", "/headers?from=login")
	if u := location(t, "the callback", resp); u.String() != "http://"+secureHost+"/headers?from=login" {
		t.Fatalf("the callback sent the browser to %s, want back to /headers?from=login", u)
	}
	if b.cookie(sessionCookie) == "" {
		t.Fatalf("the callback (%q) set no %s cookie", body, sessionCookie)
	}
	if b.cookie(loginCookie) != "" {
		t.Errorf("the callback left the %s cookie set", loginCookie)
	}
	// Back at the original path; then through the other server, which
	// opens the same session: both derive its key from the master token.
	checkIdentity(t, "server-a", b.appHeaders("server-a", "login"))
	loggedIn := time.Since(loginStart)
	checkIdentity(t, "server-b", b.appHeaders("server-b", "other-server"))
	session := b.cookie(sessionCookie)

	// A session cookie that does not open goes back to the login, and is
	// cleared.
	for name, value := range map[string]string{"tampered": tamper(session), "garbage": "garbage"} {
		req := b.request(http.MethodGet, "http://"+secureHost+"/headers", nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: value})
		resp, _ := b.do("server-a", req, true)
		checkToProvider(t, "GET /headers with a "+name+" session cookie", resp)
		cleared := false
		for _, c := range resp.Cookies() {
			cleared = cleared || c.Name == sessionCookie && c.MaxAge < 0
		}
		if !cleared {
			t.Errorf("GET /headers with a %s session cookie: Set-Cookie %q, want %s cleared", name, resp.Header.Values("Set-Cookie"), sessionCookie)
		}
	}

	// Logout: the page carries the session's CSRF token; a POST with
	// another is refused and the session holds, with the right one it ends.
	resp, body = b.get("server-b", "http://"+secureHost+"/aperio/auth/logout")
	m := csrfField.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET /aperio/auth/logout = %d %q, want 200 with a csrf field", resp.StatusCode, body)
	}
	logout := func(csrf string) int {
		req := b.request(http.MethodPost, "http://"+secureHost+"/aperio/auth/logout", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, _ := b.do("server-a", req, false)
		return resp.StatusCode
	}
	if got := logout(tamper(m[1])); got != http.StatusForbidden {
		t.Fatalf("logout with a wrong CSRF token = %d, want 403", got)
	}
	checkIdentity(t, "server-a", b.appHeaders("server-a", "after-refused-logout"))
	if got := logout(m[1]); got != http.StatusOK {
		t.Fatalf("logout with the session's CSRF token = %d, want 200", got)
	}
	if c := b.cookie(sessionCookie); c != "" {
		t.Fatalf("after logout the browser still holds %s", sessionCookie)
	}
	resp, _ = b.get("server-b", "http://"+secureHost+"/headers?from=logout")
	checkToProvider(t, "GET /headers after logout", resp)

	// A user the service's rules do not admit is refused at the callback,
	// and gets no session.
	tp.queueOIDCUser(oidcUser{Subject: "e2e-someone", Email: "someone@else.test", EmailVerified: true})
	other := tp.newBrowser()
	if resp, body := other.login("server-b", "/headers"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("callback for someone@else.test = %d %q, want 403", resp.StatusCode, body)
	}
	if other.cookie(sessionCookie) != "" {
		t.Fatalf("a refused user holds %s", sessionCookie)
	}
	figs.add(t, "oidc login: redirect, provider, callback, back at the path %v (4 hops via server-a); the whole step %v (with the docker-compose calls)",
		loggedIn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
