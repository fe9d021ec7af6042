package browser_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// a11yAudit is run in each page: what a keyboard or screen-reader user
// would trip on. Each finding names the element.
const a11yAudit = `(() => {
  const out = [];
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.name ? "[name=" + e.name + "]" : "");
  for (const e of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    const labelled = (e.id && document.querySelector("label[for='" + e.id + "']")) || e.closest("label") ||
      e.getAttribute("aria-label") || e.getAttribute("aria-labelledby") || e.getAttribute("title");
    if (!labelled) out.push("unlabelled " + name(e));
  }
  for (const e of document.querySelectorAll("button, a[href]")) {
    if (!(e.textContent.trim() || e.getAttribute("aria-label") || e.getAttribute("title"))) out.push("nameless " + name(e));
    if (e.tabIndex < 0) out.push("unfocusable " + name(e));
  }
  for (const e of document.querySelectorAll("img:not([alt]), svg:not([aria-hidden=true]):not([role=img])")) {
    if (e.closest("svg") !== e && e.tagName.toLowerCase() === "svg") continue;
    out.push("no text alternative " + name(e));
  }
  for (const e of document.querySelectorAll("svg[role=img]")) {
    if (!e.getAttribute("aria-label") && !e.querySelector("title")) out.push("svg without label");
  }
  for (const e of document.querySelectorAll("th")) {
    if (e.closest("thead") && !e.getAttribute("scope")) out.push("th without scope: " + e.textContent.trim());
  }
  if (document.querySelectorAll("h1").length !== 1) out.push("h1 count " + document.querySelectorAll("h1").length);
  let last = 1;
  for (const h of document.querySelectorAll("main h1, main h2, main h3, main h4")) {
    const n = +h.tagName[1];
    if (n > last + 1) out.push("heading skips from h" + last + " to h" + n + ": " + h.textContent.trim());
    last = n;
  }
  if (!document.documentElement.lang) out.push("no lang on html");
  return out;
})()`

// TestDashboardAccessibilityInBrowser visits every page of the menu as
// the master (who sees them all), at desktop and phone width, and checks
// the basics: labelled controls, named buttons and links, text
// alternatives for charts, scoped table headers, one h1 and no skipped
// heading level, a page language, no horizontal scrolling of the page
// itself at phone width, and that Tab reaches the skip link first.
func TestDashboardAccessibilityInBrowser(t *testing.T) {
	t.Parallel()
	st := servertest.StartStack(t, nil, nil)
	b := newBrowser(t, 1280, 800)
	b.login(t, st.Server, servertest.Token)
	var pages []string
	if err := json.Unmarshal([]byte(b.eval(t, `[...document.querySelectorAll("header nav a")].map(a => a.getAttribute("href"))`)), &pages); err != nil {
		t.Fatal(err)
	}
	if len(pages) < 10 {
		t.Fatalf("the master's menu lists %d pages: %v", len(pages), pages)
	}
	for _, width := range []int64{1280, 390} {
		b.viewport(t, width, 844)
		for _, p := range pages {
			b.open(t, st.Server.URL+p, "main h1")
			var findings []string
			if err := json.Unmarshal([]byte(b.eval(t, a11yAudit)), &findings); err != nil {
				t.Fatal(err)
			}
			for _, f := range findings {
				t.Errorf("%s at %dpx: %s", p, width, f)
			}
			if width < 500 {
				if over := b.eval(t, "document.documentElement.scrollWidth > window.innerWidth + 1"); over == "true" {
					t.Errorf("%s at %dpx scrolls sideways (scrollWidth %s)", p, width, b.eval(t, "document.documentElement.scrollWidth"))
				}
			}
		}
	}
	// The first Tab lands on the skip link.
	b.viewport(t, 1280, 800)
	b.open(t, st.Server.URL+"/aperio/", "main h1")
	b.do(t, "press Tab", keyTab())
	if got := b.eval(t, "document.activeElement.className"); !strings.Contains(got, "skip") {
		t.Errorf("the first Tab focuses %s, want the skip link", got)
	}
	b.noErrors(t)
}

// keyTab presses the Tab key.
func keyTab() chromedp.Action[chromedp.Void] { return chromedp.KeyEvent(kb.Tab) }
