package dashboard

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// fakeLogin answers the admin logout: 204 and a cleared cookie.
type fakeLogin struct{ calls int }

func (f *fakeLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls++
	if r.URL.Path != adminLogoutPath || r.Header.Get(apitype.CSRFHeader) == "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: "s", Value: "", MaxAge: -1, Path: "/"})
	w.WriteHeader(http.StatusNoContent)
}

// A page only the tests have: one action and a master-only sibling.
func init() {
	register(&page{Name: "testpage", Title: "overview.title", Order: 1000, Min: apitype.RoleOperator, Template: "overview",
		Actions: map[string]func(*Ctx) (any, error){
			"poke": func(c *Ctx) (any, error) { return nil, c.Send(http.MethodPost, "/things", nil, nil) },
		}})
	register(&page{Name: "testmaster", Title: "overview.title", Order: 1001, Min: apitype.Master, Template: "overview"})
}

// newTestUI is a dashboard on the scripted admin API with one client,
// no stats endpoint and the test page's POST /things.
func newTestUI(t testing.TB) (*UI, *adminFake, *fakeLogin) {
	t.Helper()
	api, login := newAdminFake(), &fakeLogin{}
	api.answer(http.MethodGet, "/clients", http.StatusOK, []apitype.ClientInfo{{ID: "c1", Name: "web-1", Hostnames: []string{"app.test"}, Healthy: true}})
	api.answer(http.MethodGet, "/stats", http.StatusNotFound, map[string]string{"error": "no such endpoint"})
	api.answer(http.MethodPost, "/things", http.StatusNoContent, nil)
	u, err := New(Config{API: api, Login: login})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return u, api, login
}

// mustLoad loads u's catalogs, assets and templates, for the tests that
// read them without a request.
func mustLoad(t testing.TB, u *UI) {
	t.Helper()
	if err := u.Load(); err != nil {
		t.Fatalf("Load() = %v", err)
	}
}

// TestLoad parses every embedded template, catalog and asset, and checks
// that New leaves that to the first request: a server whose dashboard
// nobody opens does not hold them.
func TestLoad(t *testing.T) {
	u, _, _ := newTestUI(t)
	if u.tmpl != nil || u.assets != nil || u.msgs != nil {
		t.Fatal("New parsed the templates, catalogs or assets; they belong to the first request")
	}
	get(t, u, "/aperio/ui/login", "")
	if u.tmpl == nil || u.assets == nil || u.msgs == nil {
		t.Fatal("the first request did not load the dashboard")
	}
	for _, p := range u.nav {
		if u.tmpl[p.Name] == nil {
			t.Errorf("page %s has no template after Load", p.Name)
		}
	}
	if err := u.Load(); err != nil {
		t.Fatalf("Load() = %v", err)
	}
}

func TestPageNeedsLogin(t *testing.T) {
	u, _, _ := newTestUI(t)
	w := get(t, u, "/aperio/ui/testpage?x=1", "")
	if w.Code != http.StatusSeeOther {
		t.Fatalf("GET page without session = %d, want 303", w.Code)
	}
	if loc := w.Header().Get("Location"); loc != LoginPage+"?redirect="+url.QueryEscape("/aperio/ui/testpage?x=1") {
		t.Errorf("Location = %q", loc)
	}
	w = get(t, u, LoginPage, "")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `action="/aperio/admin/session"`) {
		t.Errorf("GET login = %d, want 200 and the key form; body %s", w.Code, w.Body)
	}
	if strings.Contains(w.Body.String(), `id="sso"`) {
		t.Errorf("login page offers SSO with admin_oidc off")
	}
}

func TestOverviewRenders(t *testing.T) {
	u, _, _ := newTestUI(t)
	w := get(t, u, Root, apitype.RoleViewer)
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d, body %s", w.Code, w.Body)
	}
	b := w.Body.String()
	contains(t, "overview", b, "web-1", "app.test", `data-csrf="tok-viewer"`, "<html lang=\"en\">", `aria-current="page"`)
	if got := w.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
}

func TestSecurityHeadersEverywhere(t *testing.T) {
	u, _, _ := newTestUI(t)
	for _, p := range []string{Root, LoginPage, AssetPrefix + "app.js", UIPrefix + "nosuch", AssetPrefix + "nosuch.js"} {
		w := get(t, u, p, apitype.RoleViewer)
		if got := w.Header().Get("Content-Security-Policy"); got != ContentSecurityPolicy {
			t.Errorf("GET %s: CSP = %q", p, got)
		}
		if w.Header().Get("X-Frame-Options") != "DENY" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: framing/sniffing headers missing: %v", p, w.Header())
		}
	}
	if w := get(t, u, UIPrefix+"nosuch", apitype.RoleViewer); w.Code != http.StatusNotFound {
		t.Errorf("GET unknown page = %d, want 404", w.Code)
	}
}

// TestNoInlineScript keeps the CSP honest: no template carries a script
// body, an inline handler or a style attribute.
func TestNoInlineScript(t *testing.T) {
	files, _ := filepath.Glob("templates/*.html")
	inline := regexp.MustCompile(`(?i)<script(?:[^>]*)>\s*[^<\s]|\son[a-z]+\s*=|\sstyle\s*=|javascript:`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := inline.Find(b); m != nil {
			t.Errorf("%s has inline script or style: %q", f, m)
		}
	}
}

func TestRolesInMenuAndPages(t *testing.T) {
	u, _, _ := newTestUI(t)
	w := get(t, u, Root, apitype.RoleViewer)
	if strings.Contains(w.Body.String(), "/aperio/ui/testpage") || strings.Contains(w.Body.String(), "/aperio/ui/testmaster") {
		t.Errorf("a viewer's menu shows an operator's or the master's page")
	}
	if w := get(t, u, UIPrefix+"testpage", apitype.RoleViewer); w.Code != http.StatusForbidden {
		t.Errorf("viewer GET operator page = %d, want 403", w.Code)
	}
	if w := get(t, u, UIPrefix+"testmaster", apitype.RoleAdmin); w.Code != http.StatusForbidden {
		t.Errorf("admin GET master page = %d, want 403", w.Code)
	}
	w = get(t, u, Root, apitype.Master)
	if !strings.Contains(w.Body.String(), "/aperio/ui/testmaster") {
		t.Errorf("the master's menu lacks the master page")
	}
}

func TestFormActions(t *testing.T) {
	u, api, _ := newTestUI(t)
	action := UIPrefix + "testpage/poke"
	// Without the token, with a wrong one, from another origin: refused
	// before the API is called.
	for name, c := range map[string]struct {
		form url.Values
		hdr  []string
	}{
		"no-token":     {url.Values{}, nil},
		"wrong-token":  {url.Values{"csrf": {"tok-viewer"}}, nil},
		"cross-origin": {url.Values{"csrf": {"tok-operator"}}, []string{"Origin", "https://evil.example"}},
	} {
		w := post(t, u, action, apitype.RoleOperator, c.form, c.hdr...)
		if w.Code != http.StatusForbidden {
			t.Errorf("%s: POST = %d, want 403", name, w.Code)
		}
	}
	if calls := api.writes(); len(calls) != 0 {
		t.Fatalf("refused forms reached the API: %v", calls)
	}
	w := post(t, u, action, apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}}, "Origin", "http://example.com")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != UIPrefix+"testpage?done=poke" {
		t.Fatalf("POST with token = %d %q, want 303 to the page", w.Code, w.Header().Get("Location"))
	}
	wantCalls(t, api, apitype.RoleOperator, "POST /things")
	if w := post(t, u, UIPrefix+"testpage/nosuch", apitype.RoleOperator, url.Values{"csrf": {"tok-operator"}}); w.Code != http.StatusNotFound {
		t.Errorf("unknown action = %d, want 404", w.Code)
	}
	big := url.Values{"csrf": {"tok-operator"}, "x": {strings.Repeat("a", maxForm)}}
	if w := post(t, u, action, apitype.RoleOperator, big); w.Code != http.StatusForbidden {
		t.Errorf("oversized form = %d, want 403", w.Code)
	}
}

func TestLogout(t *testing.T) {
	u, _, login := newTestUI(t)
	if w := get(t, u, logoutPath, apitype.RoleViewer); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET logout = %d, want 405", w.Code)
	}
	if w := post(t, u, logoutPath, apitype.RoleViewer, url.Values{}); w.Code != http.StatusForbidden || login.calls != 0 {
		t.Errorf("logout without token = %d (logout called %d times), want 403 and none", w.Code, login.calls)
	}
	w := post(t, u, logoutPath, apitype.RoleViewer, url.Values{"csrf": {"tok-viewer"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != LoginPage {
		t.Fatalf("logout = %d %q, want 303 to the login page", w.Code, w.Header().Get("Location"))
	}
	if login.calls != 1 || !strings.Contains(w.Header().Get("Set-Cookie"), "s=;") {
		t.Errorf("logout: calls %d, Set-Cookie %q; want the admin logout's cleared cookie", login.calls, w.Header().Get("Set-Cookie"))
	}
}

func TestLanguage(t *testing.T) {
	u, _, _ := newTestUI(t)
	mustLoad(t, u)
	for _, c := range []struct{ header, cookie, want string }{
		{"", "", "en"},
		{"de-DE,de;q=0.9,en;q=0.8", "", "de"},
		{"fr, de;q=0.5", "", "de"},
		{"de;q=0, en", "", "en"},
		{"de;q=abc", "", "en"},
		{"de", "en", "en"},
		{"en", "de", "de"},
		{"en", "xx", "en"},
		{strings.Repeat("x,", 5000) + "de", "", "en"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Accept-Language", c.header)
		if c.cookie != "" {
			r.AddCookie(&http.Cookie{Name: langCookie, Value: c.cookie})
		}
		if got := u.msgs.pick(r); got != c.want {
			t.Errorf("pick(Accept-Language %.40q, cookie %q) = %q, want %q", c.header, c.cookie, got, c.want)
		}
	}
	w := get(t, u, Root, apitype.RoleViewer, "Accept-Language", "de")
	if !strings.Contains(w.Body.String(), "Übersicht") || !strings.Contains(w.Body.String(), `lang="de"`) {
		t.Errorf("German overview lacks its title")
	}
	w = get(t, u, langPath+"?to=de&redirect="+url.QueryEscape("/aperio/ui/testpage"), "")
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Set-Cookie"), langCookie+"=de") || w.Header().Get("Location") != "/aperio/ui/testpage" {
		t.Errorf("language switch = %d %q %q", w.Code, w.Header().Get("Set-Cookie"), w.Header().Get("Location"))
	}
	w = get(t, u, langPath+"?to=zz&redirect=https://evil.example/", "")
	if w.Header().Get("Set-Cookie") != "" || w.Header().Get("Location") != Root {
		t.Errorf("hostile language switch = %q %q, want no cookie and the overview", w.Header().Get("Set-Cookie"), w.Header().Get("Location"))
	}
}

func TestSafeReturn(t *testing.T) {
	for in, want := range map[string]string{
		"/aperio/ui/tokens?x=1":        "/aperio/ui/tokens?x=1",
		"/aperio/":                     "/aperio/",
		"":                             Root,
		"//evil.example/aperio/":       Root,
		"https://evil.example/aperio/": Root,
		"/\\evil.example":              Root,
		"/app/secret":                  Root,
		"/aperio/api/tokens":           Root,
		"/aperio/ui/login":             Root,
		"/aperio/ui/x\r\nSet-Cookie:":  Root,
		"/aperio/ui/" + strings.Repeat("a", 3000): Root,
	} {
		if got := safeReturn(in); got != want {
			t.Errorf("safeReturn(%.50q) = %q, want %q", in, got, want)
		}
	}
}

func TestAssets(t *testing.T) {
	u, _, _ := newTestUI(t)
	w := get(t, u, AssetPrefix+"app.js", "", "Accept-Encoding", "gzip, br")
	if w.Code != http.StatusOK || w.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET app.js = %d %v", w.Code, w.Header())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	want, _ := os.ReadFile("assets/app.js")
	if string(plain) != string(want) {
		t.Errorf("gunzipped app.js differs from the file")
	}
	etag := w.Header().Get("ETag")
	if w := get(t, u, AssetPrefix+"app.js", "", "If-None-Match", etag); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("GET with If-None-Match = %d (%d bytes), want 304", w.Code, w.Body.Len())
	}
	if w := get(t, u, AssetPrefix+"app.js", "", "Accept-Encoding", "gzip;q=0"); w.Header().Get("Content-Encoding") != "" || w.Body.String() != string(want) {
		t.Errorf("gzip;q=0 still got gzip")
	}
	for _, p := range []string{"../dashboard.go", "nosuch.js", "", "assets/app.js"} {
		if w := get(t, u, AssetPrefix+p, ""); w.Code != http.StatusNotFound {
			t.Errorf("GET asset %q = %d, want 404", p, w.Code)
		}
	}
	r := httptest.NewRequest(http.MethodPost, AssetPrefix+"app.js", nil)
	rw := httptest.NewRecorder()
	u.ServeHTTP(rw, r)
	if rw.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST asset = %d, want 405", rw.Code)
	}
}

func TestCatalogs(t *testing.T) {
	good := fstest.MapFS{
		"i18n/en/a.json": {Data: []byte(`{"x":"X"}`)},
		"i18n/de/a.json": {Data: []byte(`{"x":"Y"}`)},
	}
	if _, err := loadCatalogs(good); err != nil {
		t.Errorf("loadCatalogs(good) = %v", err)
	}
	for name, fs := range map[string]fstest.MapFS{
		"missing-translation": {"i18n/en/a.json": {Data: []byte(`{"x":"X","y":"Y"}`)}, "i18n/de/a.json": {Data: []byte(`{"x":"Y"}`)}},
		"extra-key":           {"i18n/en/a.json": {Data: []byte(`{"x":"X"}`)}, "i18n/de/a.json": {Data: []byte(`{"x":"Y","z":"Z"}`)}},
		"duplicate":           {"i18n/en/a.json": {Data: []byte(`{"x":"X"}`)}, "i18n/en/b.json": {Data: []byte(`{"x":"X"}`)}},
		"malformed":           {"i18n/en/a.json": {Data: []byte(`{"x":`)}},
		"no-english":          {"i18n/de/a.json": {Data: []byte(`{"x":"Y"}`)}},
	} {
		if _, err := loadCatalogs(fs); err == nil {
			t.Errorf("loadCatalogs(%s) = nil, want an error", name)
		}
	}
}

// TestMessagesExist checks every message key the templates and pages
// name literally is in the catalogs (which loadCatalogs keeps complete
// in every language).
func TestMessagesExist(t *testing.T) {
	u, _, _ := newTestUI(t)
	mustLoad(t, u)
	en := u.msgs[defaultLang]
	files, _ := filepath.Glob("templates/*.html")
	key := regexp.MustCompile(`\.T "([^"]+)"`)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range key.FindAllSubmatch(b, -1) {
			if _, ok := en[string(m[1])]; !ok {
				t.Errorf("%s: message %q is not in the catalog", f, m[1])
			}
		}
	}
	for _, p := range registered() {
		if _, ok := en[p.Title]; !ok {
			t.Errorf("page %s: title %q is not in the catalog", p.Name, p.Title)
		}
		for a := range p.Actions {
			if k := "done." + p.Name + "." + a; !strings.HasPrefix(p.Name, "test") {
				if _, ok := en[k]; !ok {
					t.Errorf("page %s: message %q is not in the catalog", p.Name, k)
				}
			}
		}
	}
}

// TestStatsLabelsAgree: the dashboard's English names of the API's
// pseudo-hostnames are the ones the CLI's tables print
// (apitype.StatsLabel): one name per thing (issue 39).
func TestStatsLabelsAgree(t *testing.T) {
	data, err := catalogFS.ReadFile("i18n/en/overview.json")
	if err != nil {
		t.Fatal(err)
	}
	var cat map[string]string
	if err := json.Unmarshal(data, &cat); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"stats.other": apitype.StatsOtherLabel, "stats.unrouted": apitype.StatsUnroutedLabel} {
		if cat[key] != want {
			t.Errorf("i18n/en %s = %q, the CLI prints %q", key, cat[key], want)
		}
	}
}
