package server_test

import (
	"encoding/json"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardAnonymousVisitIsNoFailedLogin: a browser without a session
// is sent to the login page without a credential check, so visiting the
// dashboard is no login_failed entry in the audit log; a visit with a
// forged session cookie still is.
func TestDashboardAnonymousVisitIsNoFailedLogin(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	failed := func() int {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/aperio/api/audit?event=login_failed", nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var entries []json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
			t.Fatalf("decode audit: %v", err)
		}
		return len(entries)
	}
	for _, p := range []string{"/aperio/", "/aperio/ui/tokens", "/aperio/ui/audit?event=x"} {
		resp, err := c.Get(s.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/aperio/ui/login?redirect=") {
			t.Errorf("anonymous GET %s = %d %q, want 303 to the login page", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if n := failed(); n != 0 {
		t.Errorf("anonymous visits wrote %d login_failed entries, want 0", n)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/aperio/", nil)
	req.AddCookie(&http.Cookie{Name: "aperio_admin_session", Value: strings.Repeat("A", 43)})
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /aperio/ with a forged session = %d, want 303 to the login page", resp.StatusCode)
	}
	if n := failed(); n != 1 {
		t.Errorf("a forged session wrote %d login_failed entries, want 1", n)
	}
}
