package access

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// authServer is a forward-auth service whose answer a test sets; it
// records the requests it receives.
type authServer struct {
	*httptest.Server
	mu     sync.Mutex
	answer http.HandlerFunc
	seen   []*http.Request
}

func newAuthServer(tb testing.TB, answer http.HandlerFunc) *authServer {
	tb.Helper()
	s := &authServer{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Clone(r.Context()))
		a := s.answer
		s.mu.Unlock()
		a(w, r)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *authServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *authServer) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

func newForward(tb testing.TB, s *authServer, edit func(*ForwardConfig)) *Forward {
	tb.Helper()
	cfg := ForwardConfig{URL: s.URL + "/verify", Client: s.Client(), CopyHeaders: []string{"X-Groups"}, UserHeader: "X-User"}
	if edit != nil {
		edit(&cfg)
	}
	f, err := NewForward(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func TestForwardAdmits(t *testing.T) {
	s := newAuthServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User", "ann")
		w.Header().Set("X-Groups", "ops")
		w.Header().Set("X-Secret-Internal", "no")
		w.Write([]byte("ok"))
	})
	f := newForward(t, s, nil)
	r := httptest.NewRequest(http.MethodPost, "/docs/../docs/a?x=1", strings.NewReader("body"))
	r.Header.Set("Authorization", "Bearer abc")
	r.Header.Add("Cookie", "sid=1")
	v := visitor("/docs/a")
	v.HTTPS = true
	got := f.Check(r, v)
	if got.Outcome != Admit || got.User != "ann" || got.Upstream.Get("X-Groups") != "ops" || got.Upstream.Get("X-Secret-Internal") != "" {
		t.Fatalf("Check = %+v, want admitted as ann with X-Groups only", got)
	}
	q := s.last()
	want := map[string]string{
		"X-Forwarded-Method": "POST",
		"X-Forwarded-Proto":  "https",
		"X-Forwarded-Host":   "app.example.com",
		"X-Forwarded-Uri":    "/docs/a?x=1",
		"X-Forwarded-For":    "203.0.113.7",
		"Authorization":      "Bearer abc",
		"Cookie":             "sid=1",
	}
	for k, w := range want {
		if g := q.Header.Get(k); g != w {
			t.Errorf("auth request %s = %q, want %q", k, g, w)
		}
	}
	if q.Method != http.MethodGet || q.URL.Path != "/verify" || q.ContentLength > 0 {
		t.Errorf("auth request = %s %s (length %d), want GET /verify without a body", q.Method, q.URL.Path, q.ContentLength)
	}
}

func TestForwardRefusals(t *testing.T) {
	tests := []struct {
		name   string
		answer http.HandlerFunc
		want   Outcome
		status int
		header map[string]string
		body   string
		reason string
	}{
		{"401 passes with its challenge", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Basic realm="sso"`)
			w.Header().Set("X-Internal", "x")
			w.WriteHeader(401)
			w.Write([]byte("log in"))
		}, Answer, 401, map[string]string{"Www-Authenticate": `Basic realm="sso"`, "X-Internal": ""}, "log in", "auth service refused with status 401"},
		{"302 passes, not followed", func(w http.ResponseWriter, r *http.Request) {
			http.SetCookie(w, &http.Cookie{Name: "csrf", Value: "1"})
			w.Header().Set("Location", "https://sso.example.com/login?rd=x")
			w.WriteHeader(http.StatusFound)
		}, Answer, 302, map[string]string{"Location": "https://sso.example.com/login?rd=x", "Set-Cookie": "csrf=1"}, "", ""},
		{"403 with a huge body keeps the status", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(403)
			w.Write([]byte(strings.Repeat("x", MaxForwardBodyBytes+1)))
		}, Answer, 403, nil, "", "body dropped"},
		{"500 fails closed", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, Unavailable, 0, nil, "", "answered status 500"},
		{"304 fails closed", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) }, Unavailable, 0, nil, "", "answered status 304"},
		{"hostile user fails closed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-User", strings.Repeat("u", 300))
		}, Unavailable, 0, nil, "", "not printable"},
		{"huge copied header fails closed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Groups", strings.Repeat("g", 5000))
		}, Unavailable, 0, nil, "", "longer than 4096"},
		{"timeout fails closed", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, Unavailable, 0, nil, "", "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newAuthServer(t, tt.answer)
			f := newForward(t, s, func(c *ForwardConfig) { c.Timeout = 200 * time.Millisecond })
			got := f.Check(newRequest(t, "/"), visitor("/"))
			if got.Outcome != tt.want || got.Status != tt.status {
				t.Fatalf("Check = %v %d (%s), want %v %d", got.Outcome, got.Status, got.Reason, tt.want, tt.status)
			}
			for k, w := range tt.header {
				if g := got.Header.Get(k); g != w {
					t.Errorf("answer %s = %q, want %q", k, g, w)
				}
			}
			if string(got.Body) != tt.body {
				t.Errorf("answer body = %d bytes, want %q", len(got.Body), tt.body)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to mention %q", got.Reason, tt.reason)
			}
			if s.calls() != 1 {
				t.Errorf("auth service called %d times, want 1 (redirects are not followed)", s.calls())
			}
		})
	}
	t.Run("unreachable fails closed", func(t *testing.T) {
		s := newAuthServer(t, func(http.ResponseWriter, *http.Request) {})
		f := newForward(t, s, nil)
		s.Close()
		if got := f.Check(newRequest(t, "/"), visitor("/")); got.Outcome != Unavailable {
			t.Errorf("Check = %v (%s), want unavailable", got.Outcome, got.Reason)
		}
	})
}

func TestForwardCache(t *testing.T) {
	admit := true
	var mu sync.Mutex
	s := newAuthServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !admit {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("X-User", "ann")
	})
	clk := newFakeClock()
	f := newForward(t, s, func(c *ForwardConfig) { c.CacheTTL = time.Minute; c.Now = clk.Now })
	req := func(cookie string) *http.Request { return newRequest(t, "/", "Cookie", cookie) }
	for range 3 {
		if got := f.Check(req("sid=1"), visitor("/")); got.Outcome != Admit || got.User != "ann" {
			t.Fatalf("Check = %v %q", got.Outcome, got.User)
		}
	}
	if n := s.calls(); n != 1 {
		t.Errorf("calls for one credential = %d, want 1", n)
	}
	f.Check(req("sid=2"), visitor("/"))
	other := visitor("/")
	other.Host = "other.example.com"
	f.Check(req("sid=1"), other)
	if n := s.calls(); n != 3 {
		t.Errorf("calls after another cookie and another host = %d, want 3", n)
	}
	mu.Lock()
	admit = false
	mu.Unlock()
	for range 2 {
		if got := f.Check(req("sid=3"), visitor("/")); got.Outcome != Answer {
			t.Fatalf("refusal = %v", got.Outcome)
		}
	}
	if n := s.calls(); n != 5 {
		t.Errorf("calls after two refusals = %d, want 5 (refusals are not remembered)", n)
	}
	clk.Advance(time.Minute)
	if got := f.Check(req("sid=1"), visitor("/")); got.Outcome != Answer {
		t.Errorf("after the TTL = %v, want the service asked again (now refusing)", got.Outcome)
	}
}

func TestNewForwardRefuses(t *testing.T) {
	ok := ForwardConfig{URL: "https://auth.example.com/verify", Client: &http.Client{}}
	if _, err := NewForward(ok); err != nil {
		t.Fatalf("NewForward(ok) = %v", err)
	}
	tests := []struct {
		name string
		edit func(*ForwardConfig)
		want string
	}{
		{"no client", func(c *ForwardConfig) { c.Client = nil }, "outbound client"},
		{"no url", func(c *ForwardConfig) { c.URL = "" }, "url"},
		{"ftp", func(c *ForwardConfig) { c.URL = "ftp://auth.example.com/" }, "url"},
		{"copy identity", func(c *ForwardConfig) { c.CopyHeaders = []string{"x-aperio-user"} }, "server's own"},
		{"copy host", func(c *ForwardConfig) { c.CopyHeaders = []string{"Host"} }, "hop-by-hop"},
		{"copy empty", func(c *ForwardConfig) { c.CopyHeaders = []string{""} }, "not a header name"},
		{"user header injection", func(c *ForwardConfig) { c.UserHeader = "X-User\r\nX: y" }, "not a header name"},
		{"timeout", func(c *ForwardConfig) { c.Timeout = time.Hour }, "timeout"},
		{"cache", func(c *ForwardConfig) { c.CacheTTL = time.Hour }, "cache TTL"},
		{"too many", func(c *ForwardConfig) { c.CopyHeaders = make([]string, 33) }, "at most 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			if _, err := NewForward(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewForward = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestForwardDropsVisitorCopies: every header the backend is told to
// trust as the auth service's (copy_headers and user_header) is removed
// from the visitor's request in every spelling, whether or not the 2xx
// answer carries it, and whichever method admitted (P4-1).
func TestForwardDropsVisitorCopies(t *testing.T) {
	var carry bool
	var mu sync.Mutex
	s := newAuthServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if carry {
			w.Header().Set("X-Forwarded-User", "alice")
			w.Header().Add("Remote-Groups", "devs")
		}
		w.WriteHeader(http.StatusOK)
	})
	f := newForward(t, s, func(c *ForwardConfig) {
		c.CopyHeaders = []string{"X-Forwarded-User", "Remote-Groups"}
		c.UserHeader = "Remote-User"
	})
	argon, _ := testHashes(t)
	basic, err := NewBasic(BasicConfig{Users: map[string]string{"ann": argon}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Methods: []Method{basic, f}})
	if err != nil {
		t.Fatal(err)
	}
	forged := http.Header{
		"X-Forwarded-User": {"forged"},
		"x-forwarded-user": {"forged"},
		"X_Forwarded_User": {"forged"},
		"X-Forwarded_user": {"forged"},
		"Remote-Groups":    {"admins"},
		"Remote_Groups":    {"admins"},
		"Remote-User":      {"root"},
		"REMOTE_USER":      {"root"},
		"X-Kept":           {"yes"},
	}
	for _, tc := range []struct {
		name       string
		carry      bool
		basic      bool
		wantUser   []string
		wantGroups []string
	}{
		{name: "answer without the headers"},
		{name: "answer with the headers", carry: true, wantUser: []string{"alice"}, wantGroups: []string{"devs"}},
		{name: "admitted by basic", basic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			carry = tc.carry
			mu.Unlock()
			r := httptest.NewRequest(http.MethodGet, "http://app.example.com/", nil)
			r.Header = forged.Clone()
			if tc.basic {
				r.SetBasicAuth("ann", "argon-pw")
			}
			d := g.Check(r, visitor("/"))
			if !d.Admitted {
				t.Fatalf("Check = %+v, want admitted", d)
			}
			if err := g.PrepareUpstream(r.Header, visitor("/"), d); err != nil {
				t.Fatal(err)
			}
			for k, vv := range r.Header {
				switch {
				case k == "X-Kept" || k == HeaderAuth || k == HeaderUser:
				case k == "X-Forwarded-User" && slices.Equal(vv, tc.wantUser):
				case k == "Remote-Groups" && slices.Equal(vv, tc.wantGroups):
				default:
					t.Errorf("backend header %s: %q, want the visitor's copies gone (want user %q, groups %q)", k, vv, tc.wantUser, tc.wantGroups)
				}
			}
			if got := r.Header["X-Forwarded-User"]; !slices.Equal(got, tc.wantUser) {
				t.Errorf("backend X-Forwarded-User = %q, want %q", got, tc.wantUser)
			}
			if r.Header.Get("X-Kept") != "yes" {
				t.Errorf("backend X-Kept = %q, want yes (not named by the method)", r.Header.Get("X-Kept"))
			}
		})
	}
}

// TestForwardURIFollowsThePathRule: X-Forwarded-Uri is the path as the
// bind matched it, escaped: parameters dropped, empty segments collapsed,
// never a decoded "?" or "%2F" (#38 item 2).
func TestForwardURIFollowsThePathRule(t *testing.T) {
	s := newAuthServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	f := newForward(t, s, nil)
	for target, want := range map[string]string{
		"/admin;x/y?q=1":      "/admin/y?q=1",
		"//admin//y":          "/admin/y",
		"/app/p;jsessionid=1": "/app/p",
		"/a%3Fb/c":            "/a%3Fb/c",
		"/a%2Fb":              "/a%2Fb",
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if got := f.Check(r, visitor("/unused")); got.Outcome != Admit {
			t.Fatalf("Check(%s) = %+v, want admitted", target, got)
		}
		if got := s.last().Header.Get("X-Forwarded-Uri"); got != want {
			t.Errorf("GET %s: X-Forwarded-Uri = %q, want %q", target, got, want)
		}
	}
}
