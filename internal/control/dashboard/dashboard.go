package dashboard

import (
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// The dashboard's paths. Root is its overview; every other page, the
// login page and the assets are under UIPrefix.
const (
	Root      = "/aperio/"
	UIPrefix  = "/aperio/ui/"
	LoginPage = UIPrefix + "login"
	// logoutPath ends the session: a form post carrying the CSRF token.
	logoutPath = UIPrefix + "logout"
	// langPath sets the language cookie: GET ?to=<lang>&redirect=<path>.
	langPath = UIPrefix + "lang"
)

// The admin login's endpoints the dashboard's forms reach (package admin
// serves them).
const (
	// SessionLoginPath takes a form with an admin key or the master token
	// and answers with the session cookie.
	SessionLoginPath = "/aperio/admin/session"
	// OIDCLoginPath starts a login through the OpenID provider.
	OIDCLoginPath = "/aperio/admin/login"
	// adminLogoutPath ends either kind of session; the dashboard calls it
	// in process with the CSRF header a form cannot set.
	adminLogoutPath = "/aperio/admin/logout"
)

// csrfField is the form field carrying the session's CSRF token.
const csrfField = "csrf"

// maxForm bounds a form post's body.
const maxForm = 64 << 10

// ContentSecurityPolicy is sent with every answer of the dashboard: its
// own scripts and styles only, no inline script or style, no framing, and
// forms and connections only to the server itself.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

//go:embed templates
var templateFS embed.FS

// Config configures the dashboard.
type Config struct {
	// API is the admin API's handler (paths under apitype.Prefix). Required.
	API http.Handler
	// Login is the handler of the admin login's paths (/aperio/admin/...),
	// called in process to log out. Required.
	Login http.Handler
	// OIDC says the admin login through OpenID Connect is on: the login
	// page offers it beside the key form.
	OIDC bool
	// HasSession reports whether a request carries an admin session
	// cookie at all. A page request without one goes to the login page
	// without asking the API, so an anonymous visit is no failed login in
	// the audit log. Nil asks the API every time.
	HasSession func(*http.Request) bool
	// Logger receives the dashboard's errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// UI is the dashboard's handler. It is safe for concurrent use.
type UI struct {
	api, login http.Handler
	hasSession func(*http.Request) bool
	oidc       bool
	log        *slog.Logger
	now        func() time.Time
	pages      map[string]*page
	nav        []*page

	// The parsed catalogs, assets and templates (about 2 MB of heap) are
	// built on the first request, so a server whose dashboard nobody
	// opens does not hold them; load is the one place that builds them.
	loadOnce sync.Once
	loadErr  error
	msgs     catalogs
	assets   map[string]*asset
	tmpl     map[string]*template.Template // page name → its template set
}

// New returns the dashboard. Its templates, catalogs and assets are parsed
// on the first request (Load); an error there is a build defect, which
// TestLoad catches.
func New(cfg Config) (*UI, error) {
	if cfg.API == nil || cfg.Login == nil {
		return nil, errors.New("dashboard: Config.API and Config.Login are required")
	}
	u := &UI{api: cfg.API, login: cfg.Login, hasSession: cfg.HasSession, oidc: cfg.OIDC, log: cfg.Logger, now: cfg.Now, pages: map[string]*page{}}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	if u.now == nil {
		u.now = time.Now
	}
	for _, p := range registered() {
		u.pages[p.Name] = p
		u.nav = append(u.nav, p)
	}
	return u, nil
}

// Load parses the catalogs, assets and templates once; later calls return
// the first call's error. ServeHTTP calls it.
func (u *UI) Load() error {
	u.loadOnce.Do(func() { u.loadErr = u.load() })
	return u.loadErr
}

func (u *UI) load() error {
	var err error
	if u.msgs, err = loadCatalogs(catalogFS); err != nil {
		return err
	}
	if u.assets, err = loadAssets(assetFS); err != nil {
		return err
	}
	u.tmpl = map[string]*template.Template{}
	for _, p := range u.nav {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/"+p.template()+".html")
		if err != nil {
			return fmt.Errorf("dashboard: page %s: %w", p.Name, err)
		}
		u.tmpl[p.Name] = t
		for _, s := range p.Scripts {
			if _, ok := u.assets[s]; !ok {
				return fmt.Errorf("dashboard: page %s: script %s is not an asset", p.Name, s)
			}
		}
	}
	for _, name := range []string{"login", "error"} {
		t, err := template.New(name+".html").Funcs(funcs).ParseFS(templateFS, "templates/"+name+".html", "templates/parts.html")
		if err != nil {
			return fmt.Errorf("dashboard: %s page: %w", name, err)
		}
		u.tmpl["_"+name] = t
	}
	return nil
}

// Owns reports whether p, a request path, is the dashboard's: Root and
// everything under UIPrefix.
func Owns(p string) bool { return p == Root || strings.HasPrefix(p, UIPrefix) }

// ServeHTTP serves the dashboard's paths (Owns). The server serves it
// behind admin_allowed_ips, as the admin API.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if err := u.Load(); err != nil {
		u.log.Error("dashboard unavailable", logkey.Err, err)
		http.Error(w, "dashboard unavailable", http.StatusInternalServerError)
		return
	}
	p := r.URL.Path
	if name, ok := strings.CutPrefix(p, AssetPrefix); ok {
		u.serveAsset(w, r, name)
		return
	}
	switch p {
	case LoginPage:
		u.serveLogin(w, r)
		return
	case logoutPath:
		u.serveLogout(w, r)
		return
	case langPath:
		u.serveLang(w, r)
		return
	}
	name, action := "overview", ""
	if p != Root {
		rest := strings.TrimPrefix(p, UIPrefix)
		name, action, _ = strings.Cut(rest, "/")
	}
	pg, ok := u.pages[name]
	if !ok || strings.Contains(action, "/") {
		u.fail(w, r, "", http.StatusNotFound, nil)
		return
	}
	u.servePage(w, r, pg, action)
}

// securityHeaders are set on every answer of the dashboard.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send
	// "Origin: null" on form posts, which the Origin checks refuse.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// Ctx is one request to a page: the browser's request, who the admin API
// takes the caller for, and the language of the answer.
type Ctx struct {
	W    http.ResponseWriter
	R    *http.Request
	Who  apitype.WhoAmI
	Lang string
	u    *UI
}

// Get reads path of the admin API (under apitype.Prefix) into out.
func (c *Ctx) Get(path string, out any) error {
	return c.u.call(c.R, "", http.MethodGet, apitype.Prefix+path, nil, out)
}

// Send makes a state-changing call to path of the admin API with the
// session's CSRF token; body (nil for none) goes as JSON, a 2xx answer is
// decoded into out (nil: ignored).
func (c *Ctx) Send(method, path string, body, out any) error {
	return c.u.call(c.R, c.Who.CSRF, method, apitype.Prefix+path, body, out)
}

// T returns the message key in the request's language.
func (c *Ctx) T(key string, args ...any) string { return c.u.msgs.text(c.Lang, key, args...) }

// Can reports whether the caller's role is at least min (viewer,
// operator, admin, or apitype.Master).
func (c *Ctx) Can(min string) bool { return roleAtLeast(c.Who.Role, min) }

// Form returns the value of a field of the posted form.
func (c *Ctx) Form(name string) string { return c.R.PostForm.Get(name) }

// roleAtLeast reports whether role may do what min may.
func roleAtLeast(role, min string) bool {
	rank := func(s string) int {
		switch s {
		case apitype.RoleViewer:
			return 1
		case apitype.RoleOperator:
			return 2
		case apitype.RoleAdmin:
			return 3
		case apitype.Master:
			return 4
		}
		return 0
	}
	return rank(role) >= rank(min) && rank(min) > 0
}

// navAdmin is the Group of the pages gathered under the header's Admin
// menu: the credentials and organization pages.
const navAdmin = "admin"

// view is what a page's template sees.
type view struct {
	*Ctx
	Page *page
	// Nav are the header's own links; Admin the Admin menu's, both only
	// the pages the caller's role sees.
	Nav, Admin []*page
	Langs      []string
	Path       string // the request's path and query, for the language switch
	Data       any    // the page's Load, or its action's answer
	Error      string // an API refusal to show above the page
	Done       string // the message of an action that succeeded
	Scripts    []string
	Now        time.Time
}

// Title returns the page's title in the request's language.
func (v *view) Title() string { return v.T(v.Page.Title) }

// InAdmin reports whether the page shown is one of the Admin menu's.
func (v *view) InAdmin() bool { return v.Page.Group == navAdmin }

// Identity is the header's name of the caller, in the request's
// language: "master token", "key <id>", an OIDC login's email, or the
// actor as the API names it for anything else.
func (v *view) Identity() string {
	a := v.Who.Actor
	switch {
	case a == apitype.Master || v.Who.Role == apitype.Master:
		return v.T("nav.who.master")
	case strings.HasPrefix(a, "key:"):
		return v.T("nav.who.key", strings.TrimPrefix(a, "key:"))
	case strings.HasPrefix(a, "oidc:"):
		return strings.TrimPrefix(a, "oidc:")
	}
	return a
}

// servePage authenticates the request through whoami, then renders the
// page (GET, HEAD) or runs its action (POST to <page>/<action>).
func (u *UI) servePage(w http.ResponseWriter, r *http.Request, pg *page, action string) {
	c := &Ctx{W: w, R: r, Lang: u.msgs.pick(r), u: u}
	if u.hasSession != nil && !u.hasSession(r) {
		redirect(w, LoginPage+"?redirect="+url.QueryEscape(r.URL.RequestURI()))
		return
	}
	if err := u.call(r, "", http.MethodGet, apitype.Prefix+"/whoami", nil, &c.Who); err != nil {
		if status(err) == http.StatusUnauthorized {
			redirect(w, LoginPage+"?redirect="+url.QueryEscape(r.URL.RequestURI()))
			return
		}
		u.fail(w, r, c.Lang, status(err), err)
		return
	}
	if pg.Min != "" && !c.Can(pg.Min) {
		u.fail(w, r, c.Lang, http.StatusForbidden, nil)
		return
	}
	v := &view{Ctx: c, Page: pg, Path: r.URL.RequestURI(), Scripts: pg.Scripts, Now: u.now()}
	for _, n := range u.nav {
		switch {
		case n.Min != "" && !c.Can(n.Min): // not for this role
		case n.Group == navAdmin:
			v.Admin = append(v.Admin, n)
		default:
			v.Nav = append(v.Nav, n)
		}
	}
	v.Langs = u.msgs.languages()
	status := http.StatusOK
	switch {
	case action == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		if d := r.URL.Query().Get("done"); d != "" {
			if _, ok := pg.Actions[d]; ok {
				v.Done = c.T("done." + pg.Name + "." + d)
			}
		}
	case action != "" && r.Method == http.MethodPost:
		act, ok := pg.Actions[action]
		if !ok {
			u.fail(w, r, c.Lang, http.StatusNotFound, nil)
			return
		}
		if err := checkForm(w, r, c.Who.CSRF); err != nil {
			u.fail(w, r, c.Lang, http.StatusForbidden, err)
			return
		}
		data, err := act(c)
		if err == nil && data == nil {
			redirect(w, pagePath(pg.Name)+"?done="+action)
			return
		}
		if err != nil {
			status = errStatus(err)
			v.Error = errText(c, err)
		} else {
			v.Data = data
			v.Done = c.T("done." + pg.Name + "." + action)
			// An action's own page may show a secret once: never cached.
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		u.fail(w, r, c.Lang, http.StatusMethodNotAllowed, nil)
		return
	}
	if v.Data == nil && pg.Load != nil {
		d, err := pg.Load(c)
		if err != nil {
			if v.Error == "" {
				status = errStatus(err)
			}
			v.Error = strings.TrimSpace(v.Error + " " + errText(c, err))
		}
		v.Data = d
	}
	u.render(w, u.tmpl[pg.Name], status, v)
}

// errStatus is the status of a page whose action or load failed with err.
func errStatus(err error) int {
	if _, ok := errors.AsType[*FormError](err); ok {
		return http.StatusBadRequest
	}
	return status(err)
}

// errText is what the page says about err: a form error's message, an
// API refusal's message (written for people, naming no secret), or a
// generic line for anything else (logged, not shown).
func errText(c *Ctx, err error) string {
	if fe, ok := errors.AsType[*FormError](err); ok {
		return fe.Message
	}
	if ae, ok := errors.AsType[*APIError](err); ok {
		return ae.Message
	}
	c.u.log.Error("dashboard page failed", logkey.Path, c.R.URL.Path, logkey.Err, err)
	return c.T("error.internal")
}

// FormError is a form field the page refused before calling the API; its
// Message is shown to the user (already in the request's language).
type FormError struct{ Message string }

func (e *FormError) Error() string { return e.Message }

// checkForm reads a posted form (bounded) and checks its CSRF token
// against the session's, and the Origin header, when the browser sent
// one, against the request's own origin.
func checkForm(w http.ResponseWriter, r *http.Request, csrf string) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("dashboard: unreadable form: %w", err)
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(r, o) {
		return errors.New("dashboard: form posted from another origin")
	}
	got := r.PostForm.Get(csrfField)
	if csrf == "" || subtle.ConstantTimeCompare([]byte(got), []byte(csrf)) != 1 {
		return errors.New("dashboard: missing or wrong csrf token")
	}
	return nil
}

// sameOrigin reports whether origin names r's own host (any scheme a
// proxy may have terminated).
func sameOrigin(r *http.Request, origin string) bool {
	o, err := url.Parse(origin)
	if err != nil || o.Host == "" {
		return false
	}
	return strings.EqualFold(o.Host, r.Host) && (o.Scheme == "http" || o.Scheme == "https")
}

// pagePath is the path of the page called name.
func pagePath(name string) string {
	if name == "overview" {
		return Root
	}
	return UIPrefix + name
}

// redirect sends the browser to a path of the dashboard after a post or
// to the login page (303: the next request is a GET).
func redirect(w http.ResponseWriter, to string) {
	w.Header().Set("Location", to)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusSeeOther)
}

// render executes t with v as a complete page.
func (u *UI) render(w http.ResponseWriter, t *template.Template, status int, v any) {
	var buf strings.Builder
	if err := t.Execute(&buf, v); err != nil {
		u.log.Error("dashboard template failed", logkey.Err, err)
		http.Error(w, "dashboard: internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	io.WriteString(w, buf.String())
}

// fail renders the error page with status.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, lang string, status int, err error) {
	if lang == "" {
		lang = u.msgs.pick(r)
	}
	if err != nil && status >= 500 {
		u.log.Error("dashboard request failed", logkey.Path, r.URL.Path, logkey.Err, err)
	}
	c := &Ctx{R: r, Lang: lang, u: u}
	key := fmt.Sprintf("error.%d", status)
	if _, ok := u.msgs[lang][key]; !ok {
		key = "error.other"
	}
	u.render(w, u.tmpl["_error"], status, struct {
		*Ctx
		Status        int
		Text, Message string
	}{c, status, http.StatusText(status), c.T(key)})
}

// serveLogin renders the login page: an admin key form posting to the
// admin API's key login, and the OpenID login when it is on.
func (u *UI) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		u.fail(w, r, "", http.StatusMethodNotAllowed, nil)
		return
	}
	c := &Ctx{R: r, Lang: u.msgs.pick(r), u: u}
	q := r.URL.Query()
	ret := safeReturn(q.Get("redirect"))
	u.render(w, u.tmpl["_login"], http.StatusOK, struct {
		*Ctx
		Redirect, OIDCLogin, Action string
		OIDC, Failed, Expired       bool
		Langs                       []string
		Path                        string
	}{c, ret, OIDCLoginPath + "?redirect=" + url.QueryEscape(ret), SessionLoginPath,
		u.oidc, q.Get("error") == "invalid", q.Get("error") == "expired", u.msgs.languages(), r.URL.RequestURI()})
}

// safeReturn returns p when it is a path of the dashboard, else Root: a
// login never sends the browser elsewhere.
func safeReturn(p string) string {
	if len(p) > 2048 || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\\r\n\t") {
		return Root
	}
	u, err := url.Parse(p)
	if err != nil || u.Host != "" || u.Scheme != "" || !Owns(u.Path) || u.Path == LoginPage || u.Path == logoutPath {
		return Root
	}
	return p
}

// serveLogout ends the session: the form's CSRF token is checked, the
// admin login's logout called in process with it, its cookies passed on,
// and the browser sent to the login page.
func (u *UI) serveLogout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		u.fail(w, r, "", http.StatusMethodNotAllowed, nil)
		return
	}
	var who apitype.WhoAmI
	if err := u.call(r, "", http.MethodGet, apitype.Prefix+"/whoami", nil, &who); err != nil {
		redirect(w, LoginPage)
		return
	}
	if err := checkForm(w, r, who.CSRF); err != nil {
		u.fail(w, r, "", http.StatusForbidden, err)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, adminLogoutPath, http.NoBody)
	if err != nil {
		u.fail(w, r, "", http.StatusInternalServerError, err)
		return
	}
	req.Host, req.RemoteAddr, req.TLS = r.Host, r.RemoteAddr, r.TLS
	req.Header["Cookie"] = r.Header["Cookie"]
	req.Header.Set(apitype.CSRFHeader, who.CSRF)
	rec := newRecorder(64 << 10)
	u.login.ServeHTTP(rec, req)
	if rec.status/100 != 2 {
		u.fail(w, r, "", rec.status, fmt.Errorf("dashboard: logout answered %d: %s", rec.status, rec.buf.String()))
		return
	}
	for _, c := range rec.h.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", c)
	}
	redirect(w, LoginPage)
}

// serveLang sets the language cookie and goes back to the page.
func (u *UI) serveLang(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, ok := u.msgs[q.Get("to")]; ok {
		http.SetCookie(w, &http.Cookie{Name: langCookie, Value: q.Get("to"), Path: "/aperio/", MaxAge: 365 * 24 * 3600, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	}
	redirect(w, safeReturnOrLogin(q.Get("redirect")))
}

// safeReturnOrLogin is safeReturn that also lets the login page be the
// target (the language switch is on it).
func safeReturnOrLogin(p string) string {
	if strings.HasPrefix(p, LoginPage) && (len(p) == len(LoginPage) || p[len(LoginPage)] == '?') && len(p) < 2048 && !strings.ContainsAny(p, "\\\r\n\t") {
		return p
	}
	return safeReturn(p)
}

// page is one page of the dashboard. Each page registers itself from an
// init function in its own file (page_<name>.go), so pages are added
// without editing a shared list.
type page struct {
	// Name is the page's path segment (UIPrefix+Name; "overview" is
	// Root) and its template, templates/<Name>.html, which defines
	// "content".
	Name string
	// Title is the catalog key of the page's name in the menu and title.
	Title string
	// Order places the page in the menu, smallest first.
	Order int
	// Template names the page's template when it is not Name.
	Template string
	// Group is the menu the page's link sits in: "" for the header's own
	// row, navAdmin for the Admin menu (a disclosure, so the header fits
	// one row at 1280 px).
	Group string
	// Min is the least role that sees the page ("" or viewer: everyone;
	// apitype.Master: the master token only). The API refuses what a role
	// may not do whatever a page shows.
	Min string
	// Scripts are assets (names under assets/) the page loads as
	// modules, besides app.js.
	Scripts []string
	// Load returns the page's data; nil renders with none.
	Load func(c *Ctx) (any, error)
	// Actions are the page's form posts, POST UIPrefix+Name+"/"+action,
	// the CSRF token already checked. An action returning (nil, nil)
	// sends the browser back to the page with the message
	// "done.<Name>.<action>"; one returning data renders the page with
	// it (and that message), as to show a new secret once.
	Actions map[string]func(c *Ctx) (any, error)
}

var (
	pagesMu  sync.Mutex // guards allPages
	allPages []*page
)

// register adds a page; it is called from init functions.
func register(p *page) {
	pagesMu.Lock()
	defer pagesMu.Unlock()
	allPages = append(allPages, p)
}

// registered returns the pages in menu order.
func registered() []*page {
	pagesMu.Lock()
	defer pagesMu.Unlock()
	out := append([]*page(nil), allPages...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Order < out[j].Order })
	return out
}

// template returns the name of p's template file (without .html).
func (p *page) template() string {
	if p.Template != "" {
		return p.Template
	}
	return p.Name
}
