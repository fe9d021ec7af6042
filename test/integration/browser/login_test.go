package browser_test

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
)

func TestDashboardLoginPageInBrowser(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	b := newBrowser(t, 1280, 800)
	b.open(t, s.URL+"/aperio/", "#key")
	if loc := b.location(t); !strings.Contains(loc, "/aperio/ui/login?redirect=") {
		t.Errorf("an anonymous visit to /aperio/ landed on %s, want the login page", loc)
	}
	if got := b.text(t, "h1"); got != "Aperio" {
		t.Errorf("login page h1 = %q", got)
	}
	b.click(t, `a[lang="de"]`, "#key")
	b.waitText(t, "label[for=key]", "Admin-Schlüssel")
	b.screenshot(t, "login")
	b.noErrors(t)
}

// login logs the browser in to s's dashboard with key (an admin key or
// the master token) through the login form, and waits for the overview.
func (b *browser) login(t *testing.T, s *servertest.Server, key string) {
	t.Helper()
	b.open(t, s.URL+"/aperio/ui/login", "#key")
	b.fill(t, "#key", key)
	b.click(t, "#login", "#logout")
}

func TestDashboardLoginLogoutInBrowser(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	b := newBrowser(t, 1280, 800)

	// A wrong key stays on the login page with a message.
	b.open(t, s.URL+"/aperio/ui/login", "#key")
	b.fill(t, "#key", "apk_wrong")
	b.click(t, "#login", "#key")
	b.waitText(t, "[role=alert]", "not accepted")

	// The master token: the overview, as master.
	b.login(t, s, servertest.Token)
	if got := b.text(t, "#identity"); got != "master token" {
		t.Errorf("identity shown after the master token's login = %q, want master token", got)
	}
	if got := b.eval(t, "document.body.dataset.role"); got != `"master"` {
		t.Errorf("role after the master token's login = %s, want master", got)
	}
	if loc := b.location(t); !strings.HasSuffix(loc, "/aperio/") {
		t.Errorf("after login the browser is at %s, want the overview", loc)
	}
	// The cookie is not readable by the page's scripts (HttpOnly).
	if got := b.eval(t, "document.cookie"); strings.Contains(got, "aperio_admin_session") {
		t.Errorf("document.cookie = %s: the session cookie is readable by scripts", got)
	}
	b.screenshot(t, "overview-empty")

	// Logout ends the session server-side: the overview asks for a login again.
	b.click(t, "#logout", "#key")
	b.open(t, s.URL+"/aperio/", "#key")
	if loc := b.location(t); !strings.Contains(loc, "/aperio/ui/login") {
		t.Errorf("after logout /aperio/ shows %s, want the login page", loc)
	}
	b.noErrors(t)
}
