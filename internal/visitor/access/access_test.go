package access

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeMethod answers every request with res and counts its calls.
type fakeMethod struct {
	name    string
	res     Result
	headers []string
	cookies []string
	mu      sync.Mutex
	calls   int
}

func (m *fakeMethod) Name() string { return m.name }
func (m *fakeMethod) Check(*http.Request, Visitor) Result {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	return m.res
}
func (m *fakeMethod) Credentials() ([]string, []string) { return m.headers, m.cookies }

func newRequest(tb testing.TB, target string, header ...string) *http.Request {
	tb.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

func visitor(path string) Visitor {
	return Visitor{Addr: netip.MustParseAddr("203.0.113.7"), Host: "app.example.com", Path: path}
}

func newGate(tb testing.TB, cfg Config) *Gate {
	tb.Helper()
	g, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return g
}

func TestParsePosture(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Posture
		ok   bool
	}{
		{"allow", Allow, true}, {"deny", Deny, true},
		{"", Allow, false}, {"Deny", Allow, false}, {"closed", Allow, false}, {"deny ", Allow, false},
	} {
		got, err := ParsePosture(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParsePosture(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != tt.in {
			t.Errorf("Posture(%q).String() = %q", tt.in, got)
		}
	}
}

func TestOpen(t *testing.T) {
	for _, tt := range []struct {
		def             Posture
		public, hasAuth bool
		want            bool
	}{
		{Allow, false, false, true},
		{Allow, true, false, true},
		{Allow, false, true, false},
		{Deny, false, false, false},
		{Deny, true, false, true},
		{Deny, false, true, false},
		{Deny, true, true, false},
	} {
		if got := Open(tt.def, tt.public, tt.hasAuth); got != tt.want {
			t.Errorf("Open(%v, public %v, auth %v) = %v, want %v", tt.def, tt.public, tt.hasAuth, got, tt.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{Public: true, Methods: []Method{&fakeMethod{name: "x"}}}); err == nil {
		t.Error("New(public and methods) = nil error")
	}
	if _, err := New(Config{Methods: []Method{nil}}); err == nil {
		t.Error("New(nil method) = nil error")
	}
}

func TestGateCheck(t *testing.T) {
	admit := func(name, user string) *fakeMethod {
		return &fakeMethod{name: name, res: Result{Outcome: Admit, User: user, Reason: "ok", Upstream: http.Header{"X-From": {name}}}}
	}
	absent := func(name, challenge string) *fakeMethod {
		return &fakeMethod{name: name, res: Result{Outcome: Absent, Reason: "none", Challenge: challenge}}
	}
	invalid := func(name, challenge string) *fakeMethod {
		return &fakeMethod{name: name, res: Result{Outcome: Invalid, Reason: "bad", Challenge: challenge}}
	}
	unavailable := &fakeMethod{name: "jwt", res: Result{Outcome: Unavailable, Reason: "key server down"}}
	answer := &fakeMethod{name: "forward", res: Result{Outcome: Answer, Status: http.StatusFound, Header: http.Header{"Location": {"https://login.example.com/"}}, Body: []byte("go"), Reason: "login"}}
	denied, err := ParseIPRules(nil, []string{"203.0.113.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := ParseIPRules([]string{"198.51.100.0/24"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want Decision
	}{
		{"open by default", Config{}, Decision{Admitted: true, Reason: "open"}},
		{"public under deny", Config{Default: Deny, Public: true}, Decision{Admitted: true, Reason: "open"}},
		{"closed is hidden", Config{Default: Deny}, Decision{Hidden: true, Reason: "closed: default_access deny, no auth methods, not public"}},
		{"denied ip beats open", Config{IPs: denied}, Decision{Hidden: true, Reason: "visitor 203.0.113.7 is in denied_ips 203.0.113.0/24"}},
		{"not in allowed ips", Config{IPs: elsewhere, Methods: []Method{admit("basic", "al")}}, Decision{Hidden: true, Reason: "visitor 203.0.113.7 is not in allowed_ips"}},
		{"first admit wins", Config{Methods: []Method{invalid("bearer", "Bearer"), admit("basic", "al"), admit("jwt", "bo")}},
			Decision{Admitted: true, User: "al", Method: "basic", Upstream: http.Header{"X-From": {"basic"}}, Reason: "basic: ok"}},
		{"unavailable fails closed", Config{Methods: []Method{absent("basic", "Basic"), unavailable, answer}},
			Decision{Status: 503, Header: http.Header{"Retry-After": {"5"}}, Reason: "basic: none; jwt: key server down; forward: login"}},
		{"answer beats challenge", Config{Methods: []Method{absent("basic", "Basic"), answer}},
			Decision{Status: 302, Header: http.Header{"Location": {"https://login.example.com/"}}, Body: []byte("go"), Reason: "basic: none; forward: login"}},
		{"challenges of all, once each", Config{Methods: []Method{absent("basic", `Basic realm="a"`), invalid("bearer", "Bearer"), invalid("jwt", "Bearer")}},
			Decision{Status: 401, Header: http.Header{"Www-Authenticate": {`Basic realm="a"`, "Bearer"}}, Reason: "basic: none; bearer: bad; jwt: bad"}},
		{"unprintable user refused", Config{Methods: []Method{admit("jwt", "al\r\nX-Evil: 1")}},
			Decision{Status: 401, Reason: "jwt: the user it names is not printable UTF-8 of at most 256 bytes"}},
		{"overlong user refused", Config{Methods: []Method{admit("jwt", strings.Repeat("u", 257))}},
			Decision{Status: 401, Reason: "jwt: the user it names is not printable UTF-8 of at most 256 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, tt.cfg)
			got := g.Check(newRequest(t, "/x"), visitor("/x"))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGateStopsAtFirstAdmit(t *testing.T) {
	first := &fakeMethod{name: "bearer", res: Result{Outcome: Admit, User: "ci"}}
	second := &fakeMethod{name: "forward", res: Result{Outcome: Admit}}
	g := newGate(t, Config{Methods: []Method{first, second}})
	if d := g.Check(newRequest(t, "/"), visitor("/")); !d.Admitted || d.Method != "bearer" {
		t.Fatalf("Check = %+v, want admitted by bearer", d)
	}
	if second.calls != 0 {
		t.Errorf("forward was called %d times after bearer admitted, want 0", second.calls)
	}
}

func TestPrepareUpstream(t *testing.T) {
	signer, err := NewSigner(SignerConfig{Issuer: "https://aperio.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	basic := &fakeMethod{name: "basic", headers: []string{"authorization"}, res: Result{Outcome: Admit, User: "al"}}
	jwtCookie := &fakeMethod{name: "jwt", cookies: []string{"idp_token"}, res: Result{Outcome: Admit, User: "bo"}}
	inbound := func() http.Header {
		return http.Header{
			"Authorization": {"Basic YWw6cHc="},
			"X-Aperio-User": {"root"},
			"X-Aperio-Auth": {"forged"},
			HeaderIdentity:  {"forged"},
			"Cookie":        {"a=1; aperio_share=tok; idp_token=t", "aperio_session=s; aperio_admin_session=k; __Host-aperio_admin_session=k", "b=2"},
			"X-Request-Id":  {"r1"},
		}
	}
	t.Run("admitted by a method", func(t *testing.T) {
		g := newGate(t, Config{Methods: []Method{basic, jwtCookie}})
		h := inbound()
		d := Decision{Admitted: true, User: "al", Method: "basic", Upstream: http.Header{"X-Groups": {"ops"}}}
		if err := g.PrepareUpstream(h, visitor("/"), d); err != nil {
			t.Fatal(err)
		}
		want := http.Header{
			"X-Aperio-User": {"al"},
			"X-Aperio-Auth": {"basic"},
			"Cookie":        {"a=1", "b=2"},
			"X-Request-Id":  {"r1"},
			"X-Groups":      {"ops"},
		}
		if diff := cmp.Diff(want, h); diff != "" {
			t.Errorf("header (-want +got):\n%s", diff)
		}
	})
	t.Run("open keeps the backend's own credentials", func(t *testing.T) {
		g := newGate(t, Config{})
		h := inbound()
		if err := g.PrepareUpstream(h, visitor("/"), Decision{Admitted: true}); err != nil {
			t.Fatal(err)
		}
		want := inbound()
		delete(want, "X-Aperio-User")
		delete(want, "X-Aperio-Auth")
		delete(want, HeaderIdentity)
		want["Cookie"] = []string{"a=1; idp_token=t", "b=2"}
		if diff := cmp.Diff(want, h); diff != "" {
			t.Errorf("header (-want +got):\n%s", diff)
		}
	})
	t.Run("share admission has no user", func(t *testing.T) {
		g := newGate(t, Config{Default: Deny, Identity: signer})
		h := inbound()
		if err := g.PrepareUpstream(h, visitor("/"), Decision{Admitted: true, Method: MethodShare}); err != nil {
			t.Fatal(err)
		}
		if got := h.Get("X-Aperio-User"); got != "" {
			t.Errorf("X-Aperio-User = %q, want none", got)
		}
		if got := h.Get("X-Aperio-Auth"); got != "share" {
			t.Errorf("X-Aperio-Auth = %q, want share", got)
		}
		if got := h.Get("Authorization"); got == "" {
			t.Error("Authorization removed although no method of the gate reads it")
		}
		if got := h.Values("Cookie"); !slices.Equal(got, []string{"a=1; idp_token=t", "b=2"}) {
			t.Errorf("Cookie = %q, want the share and session cookies removed", got)
		}
		if tok := h.Get(HeaderIdentity); tok == "" || tok == "forged" {
			t.Errorf("%s = %q, want a signed token", HeaderIdentity, tok)
		}
	})
}

func TestRemoveCookies(t *testing.T) {
	names := []string{"aperio_share", "aperio_session"}
	tests := []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"a=1"}, []string{"a=1"}},
		{[]string{"aperio_share=x"}, nil},
		{[]string{"a=1;aperio_share=x;b=2"}, []string{"a=1; b=2"}},
		{[]string{" aperio_session = y ; c=3"}, []string{"c=3"}},
		{[]string{"not_aperio_share=1"}, []string{"not_aperio_share=1"}},
		{[]string{"aperio_share"}, nil},
		{[]string{";;aperio_share=1;;"}, nil},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.in != nil {
			h["Cookie"] = slices.Clone(tt.in)
		}
		removeCookies(h, names)
		if got := h["Cookie"]; !slices.Equal(got, tt.want) {
			t.Errorf("removeCookies(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCookieValue(t *testing.T) {
	tests := []struct {
		lines []string
		want  string
		ok    bool
	}{
		{[]string{"a=1; aperio_share=tok"}, "tok", true},
		{[]string{`aperio_share="tok"`}, "tok", true},
		{[]string{"a=1", "aperio_share=second"}, "second", true},
		{[]string{"aperio_share=first; aperio_share=second"}, "first", true},
		{[]string{"xaperio_share=tok"}, "", false},
		{[]string{"aperio_share"}, "", false},
		{[]string{""}, "", false},
	}
	for _, tt := range tests {
		got, ok := cookieValue(http.Header{"Cookie": tt.lines}, CookieShare)
		if got != tt.want || ok != tt.ok {
			t.Errorf("cookieValue(%q) = %q, %v; want %q, %v", tt.lines, got, ok, tt.want, tt.ok)
		}
	}
}

func TestAuthorization(t *testing.T) {
	tests := []struct {
		lines  []string
		scheme string
		want   string
		ok     bool
	}{
		{[]string{"Basic abc"}, "Basic", "abc", true},
		{[]string{"basic abc"}, "Basic", "abc", true},
		{[]string{"BEARER  tok"}, "Bearer", "tok", true},
		{[]string{"Basicabc"}, "Basic", "", false},
		{[]string{"Basic"}, "Basic", "", false},
		{[]string{"Bearer tok"}, "Basic", "", false},
		{[]string{"Basic a", "Basic b"}, "Basic", "", false},
		{nil, "Basic", "", false},
	}
	for _, tt := range tests {
		got, ok := authorization(http.Header{"Authorization": tt.lines}, tt.scheme)
		if got != tt.want || ok != tt.ok {
			t.Errorf("authorization(%q, %s) = %q, %v; want %q, %v", tt.lines, tt.scheme, got, ok, tt.want, tt.ok)
		}
	}
}

// canceled returns a request whose context is already done.
func canceled(r *http.Request) *http.Request {
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	return r.WithContext(ctx)
}

func TestAuthMethods(t *testing.T) {
	a, _ := testHashes(t)
	ms, err := Auth{
		Forward: &ForwardConfig{URL: "https://auth.example.com/", Client: &http.Client{}},
		Basic:   &BasicConfig{Users: map[string]string{"ann": a}},
		Bearer:  &BearerConfig{Keys: map[string]string{"ci": digest("k")}},
		JWT:     &JWTConfig{JWKSURL: "https://idp.example.com/jwks", Client: &http.Client{}, Issuer: "i", Audience: []string{"a"}},
	}.Methods()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name())
	}
	if want := []string{"bearer", "basic", "jwt", "forward"}; !slices.Equal(names, want) {
		t.Errorf("Methods = %q, want %q", names, want)
	}
	_, err = Auth{Basic: &BasicConfig{Users: map[string]string{"ann": "plain"}}, Bearer: &BearerConfig{}}.Methods()
	if err == nil || !strings.Contains(err.Error(), `basic user "ann"`) || !strings.Contains(err.Error(), "bearer needs at least one key") {
		t.Errorf("Methods(bad) = %v, want both methods' problems", err)
	}
	if ms, err := (Auth{}).Methods(); err != nil || len(ms) != 0 {
		t.Errorf("Methods(none) = %v, %v", ms, err)
	}
}
