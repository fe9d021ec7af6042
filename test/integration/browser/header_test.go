package browser_test

import (
	"encoding/json"
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// headerRows measures the dashboard header in the open page: the
// vertical centres of the brand, the menu's first link, its last item
// and the logout button, in CSS pixels.
const headerRows = `(() => {
  const mid = (sel) => { const e = document.querySelector(sel); if (!e) return null; const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; };
  const items = document.querySelectorAll("header nav > ul > li");
  const last = items.length ? items[items.length - 1] : null;
  const r = last ? last.getBoundingClientRect() : null;
  return { brand: mid("header .brand"), first: mid("header nav > ul > li:first-child a"), last: r ? (r.top + r.bottom) / 2 : null,
    logout: mid("#logout"), height: document.querySelector("header.top").getBoundingClientRect().height };
})()`

// TestDashboardHeaderOneRowInBrowser: at 1280x900 the master (who sees
// every page) gets the header on one row, in English and in German: the
// brand, the menu's first and last items and the logout button share a
// line. The admin pages sit in the Admin menu, which opens on its
// summary, closes on Escape, and marks itself when one of its pages is
// shown; the identity reads "master token".
func TestDashboardHeaderOneRowInBrowser(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	b := newBrowser(t, 1280, 900)
	b.login(t, s, servertest.Token)
	if got := b.text(t, "#identity"); got != "master token" {
		t.Errorf("identity = %q, want %q", got, "master token")
	}
	for _, lang := range []string{"en", "de"} {
		b.open(t, s.URL+"/aperio/ui/lang?to="+lang+"&redirect=/aperio/ui/traffic", "main h1")
		var m struct{ Brand, First, Last, Logout, Height float64 }
		raw := b.eval(t, headerRows)
		if err := json.Unmarshal([]byte(raw), &m); err != nil || m.Brand == 0 || m.First == 0 || m.Last == 0 || m.Logout == 0 {
			t.Fatalf("%s: header measures %s (%v)", lang, raw, err)
		}
		lo, hi := min(m.Brand, m.First, m.Last, m.Logout), max(m.Brand, m.First, m.Last, m.Logout)
		if hi-lo > 8 {
			t.Errorf("%s: the header wraps at 1280 px: centres brand %.0f, first link %.0f, last item %.0f, logout %.0f (height %.0f)",
				lang, m.Brand, m.First, m.Last, m.Logout, m.Height)
		}
		b.screenshot(t, "header-"+lang)
	}
	b.open(t, s.URL+"/aperio/ui/lang?to=en&redirect=/aperio/", "main h1")

	// The Admin menu: closed, open on its summary, its links followed.
	if b.eval(t, `document.querySelector("#nav-admin a[href='/aperio/ui/tokens']").checkVisibility()`) != "false" {
		t.Errorf("the Admin menu's links show before it is opened")
	}
	b.click(t, "#nav-admin summary", `#nav-admin a[href="/aperio/ui/tokens"]`)
	b.do(t, "press Escape", keyEscape())
	if b.eval(t, `document.getElementById("nav-admin").open`) != "false" {
		t.Errorf("Escape left the Admin menu open")
	}
	if got := b.eval(t, `document.activeElement.tagName`); got != `"SUMMARY"` {
		t.Errorf("after Escape the focus is on %s, want the menu's summary", got)
	}
	b.click(t, "#nav-admin summary", `#nav-admin a[href="/aperio/ui/keys"]`)
	b.click(t, `#nav-admin a[href="/aperio/ui/keys"]`, "#create-key")
	if !b.has(t, "#nav-admin summary.current") {
		t.Errorf("on the keys page the Admin menu is not marked as the current section")
	}
	b.noErrors(t)
}

// keyEscape presses the Escape key.
func keyEscape() chromedp.Action[chromedp.Void] { return chromedp.KeyEvent(kb.Escape) }
