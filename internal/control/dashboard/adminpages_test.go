package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// adminFake is the admin API as the admin pages' tests script it: an
// answer per "METHOD /path" (relative to apitype.Prefix, no query), every
// call recorded with its query, JSON body and CSRF header. The cookie
// "s=<role>" is a session of that role with CSRF token "tok-<role>";
// none is refused with 401, a write with the wrong token with 403.
type adminFake struct {
	mu      sync.Mutex // guards the following fields
	answers map[string]fakeAnswer
	calls   []fakeCall
}

// fakeAnswer is one scripted answer: its status and its JSON body (nil:
// none).
type fakeAnswer struct {
	status int
	body   any
}

// fakeCall is one call the pages made.
type fakeCall struct {
	Method, Path, Query, Body, CSRF string
}

func (c fakeCall) String() string {
	s := c.Method + " " + c.Path
	if c.Query != "" {
		s += "?" + c.Query
	}
	if c.Body != "" {
		s += " " + c.Body
	}
	return s
}

func newAdminFake() *adminFake { return &adminFake{answers: map[string]fakeAnswer{}} }

// answer scripts the answer to method and path.
func (f *adminFake) answer(method, path string, status int, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[method+" "+path] = fakeAnswer{status, body}
}

// writes returns the state-changing calls made so far.
func (f *adminFake) writes() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.Method != http.MethodGet {
			out = append(out, c)
		}
	}
	return out
}

// reads returns the GET calls to path made so far.
func (f *adminFake) reads(path string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.Method == http.MethodGet && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

func (f *adminFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	role, done := fakeSession(w, r, "org1")
	if done {
		return
	}
	path := strings.TrimPrefix(r.URL.Path, apitype.Prefix)
	b, done := readBody(w, r)
	if done {
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{r.Method, path, r.URL.RawQuery, b, r.Header.Get(apitype.CSRFHeader)})
	a, ok := f.answers[r.Method+" "+path]
	f.mu.Unlock()
	if r.Method != http.MethodGet && csrfRefused(w, r, role) {
		return
	}
	if !ok {
		if r.Method == http.MethodGet {
			w.Write([]byte("[]"))
			return
		}
		apiError(w, http.StatusNotFound, "no such endpoint")
		return
	}
	if a.body == nil {
		w.WriteHeader(a.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	json.NewEncoder(w).Encode(a.body)
}

// adminTestNow is the clock of the admin pages' tests.
var adminTestNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func newAdminUI(t testing.TB) (*UI, *adminFake) {
	t.Helper()
	api := newAdminFake()
	u, err := New(Config{API: api, Login: &fakeLogin{}, Now: func() time.Time { return adminTestNow }})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api
}

// submit posts form to the page action as role, with role's CSRF token.
func submit(t testing.TB, u *UI, action, role string, form url.Values) (int, string) {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", "tok-"+role)
	w := post(t, u, UIPrefix+action, role, form)
	return w.Code, w.Body.String()
}

// render GETs the page as role and fails t unless it answers 200.
func render(t testing.TB, u *UI, path, role string, hdr ...string) string {
	t.Helper()
	w := get(t, u, UIPrefix+path, role, hdr...)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s as %s = %d, want 200; body %s", path, role, w.Code, w.Body)
	}
	return w.Body.String()
}

// wantCalls fails t unless the writes made are exactly want (their
// String form) and each carried role's CSRF token.
func wantCalls(t testing.TB, f *adminFake, role string, want ...string) {
	t.Helper()
	got := f.writes()
	var gs []string
	for _, c := range got {
		gs = append(gs, c.String())
		if c.CSRF != "tok-"+role {
			t.Errorf("%s sent CSRF %q, want tok-%s", c, c.CSRF, role)
		}
	}
	if strings.Join(gs, "\n") != strings.Join(want, "\n") {
		t.Errorf("API writes:\n%s\nwant:\n%s", strings.Join(gs, "\n"), strings.Join(want, "\n"))
	}
}

// badForm is a form a page's action refuses with 400 and msg.
type badForm struct {
	form url.Values
	msg  string
}

// wantBadForms submits each form to action as role (with its CSRF token)
// and fails t unless each answers 400 with its message.
func wantBadForms(t testing.TB, u *UI, action, role string, forms map[string]badForm) {
	t.Helper()
	for name, c := range forms {
		if code, b := submit(t, u, action, role, c.form); code != http.StatusBadRequest || !strings.Contains(b, c.msg) {
			t.Errorf("%s: %s = %d, want 400 with %q", name, action, code, c.msg)
		}
	}
}

// badQuery is a page query the page refuses with 400 and msg.
type badQuery struct{ q, msg string }

// wantBadQueries GETs page?q for each query as role and fails t unless
// each answers 400 with its message.
func wantBadQueries(t testing.TB, u *UI, page, role string, queries map[string]badQuery) {
	t.Helper()
	for name, c := range queries {
		if w := get(t, u, UIPrefix+page+"?"+c.q, role); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s: GET %s?%.40s = %d, want 400 with %q", name, page, c.q, w.Code, c.msg)
		}
	}
}

// contains fails t for each of want that body lacks.
func contains(t testing.TB, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// lacks fails t for each of unwanted that body has.
func lacks(t testing.TB, what, body string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(body, w) {
			t.Errorf("%s has %q", what, w)
		}
	}
}

// TestReferrerPolicyKeepsFormOrigin pins the Referrer-Policy: under
// no-referrer a browser posts every form with "Origin: null", which the
// forms' origin check (and the key login's) refuse, so no form of the
// dashboard would work in a browser (TestDashboardAdminPagesInBrowser
// saw it).
func TestReferrerPolicyKeepsFormOrigin(t *testing.T) {
	u, _ := newAdminUI(t)
	for _, p := range []string{LoginPage, UIPrefix + "tokens"} {
		if got := get(t, u, p, apitype.RoleAdmin).Header().Get("Referrer-Policy"); got != "same-origin" {
			t.Errorf("GET %s: Referrer-Policy = %q, want same-origin", p, got)
		}
	}
	w := post(t, u, UIPrefix+"tokens/revoke", apitype.RoleAdmin, url.Values{"csrf": {"tok-admin"}, "id": {"t"}}, "Origin", "null")
	if w.Code != http.StatusForbidden {
		t.Errorf("a form posted with Origin: null = %d, want 403", w.Code)
	}
}
