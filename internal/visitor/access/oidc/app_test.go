package oidc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// newTestApp returns an App of a Provider without discovery, on a clock
// fixed at *now.
func newTestApp(t testing.TB, now *time.Time) *App {
	t.Helper()
	p := testProvider(t, t0)
	a, err := p.NewApp(AppConfig{Name: "admin", SessionCookie: "aperio_admin", LoginCookie: "aperio_admin_login",
		Keys: []Key{testKey(7, "b")}, SessionTTL: 8 * time.Hour, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAppSession: an issued session opens on its host until its sealed
// expiry, and never on another host or after it, whatever the cookie's
// own Max-Age; NewApp refuses a service cookie's name.
func TestAppSession(t *testing.T) {
	now := t0
	a := newTestApp(t, &now)
	rec := httptest.NewRecorder()
	if _, err := a.Issue(rec, Identity{Subject: "s1", Email: "jane@example.com", EmailVerified: true}, []string{"ops"}, "admin.example.com", true); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "https://admin.example.com/", nil)
	for _, c := range rec.Result().Cookies() {
		if c.Name != "__Host-aperio_admin" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.Path != "/" {
			t.Fatalf("cookie = %+v, want __Host-aperio_admin, HttpOnly, Secure, Lax, Path=/", c)
		}
		req.AddCookie(c)
	}
	if s, err := a.Session(req, "admin.example.com", true); err != nil || s.Email != "jane@example.com" || len(s.Groups) != 1 || s.CSRFToken() == "" {
		t.Fatalf("Session = %+v, %v, want jane with her group and a CSRF token", s, err)
	}
	if _, err := a.Session(req, "other.example.com", true); !errors.Is(err, ErrSessionInvalid) {
		t.Errorf("Session on another host = %v, want ErrSessionInvalid", err)
	}
	now = t0.Add(8 * time.Hour)
	if _, err := a.Session(req, "admin.example.com", true); !errors.Is(err, ErrExpired) {
		t.Errorf("Session after 8 h = %v, want ErrExpired", err)
	}
	if _, err := testProvider(t, t0).NewApp(AppConfig{Name: "x", SessionCookie: SessionCookie, LoginCookie: "l", Keys: []Key{testKey(1, "a")}, SessionTTL: time.Hour}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewApp with the services' session cookie = %v, want ErrConfig", err)
	}
}

// BenchmarkAppSession is the admin API's per-request cost of a session:
// open, decode, host and expiry.
func BenchmarkAppSession(b *testing.B) {
	now := t0
	a := newTestApp(b, &now)
	rec := httptest.NewRecorder()
	if _, err := a.Issue(rec, Identity{Subject: "s1", Email: "jane@example.com", EmailVerified: true}, []string{"ops", "sre"}, "admin.example.com", true); err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "https://admin.example.com/", nil)
	for _, c := range rec.Result().Cookies() {
		req.AddCookie(c)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Session(req, "admin.example.com", true); err != nil {
			b.Fatal(err)
		}
	}
}
