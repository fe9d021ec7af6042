package browser_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/chromedp/chromedp"
)

// waitAttr waits until the attribute attr of the element css contains
// want, up to browserWait: a chart's aria-label after its redraw.
func (b *browser) waitAttr(t *testing.T, css, attr, want string) {
	t.Helper()
	expr := "(() => { const e = document.querySelector(" + jsString(css) + "); return !!e && (e.getAttribute(" + jsString(attr) + ") || '').includes(" + jsString(want) + "); })()"
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("browser: waiting for %q in %s's %s: %v", want, css, attr, err)
	}
}

// TestDashboardOpsPagesInBrowser logs in with the master token and walks
// the overview, clients and traffic pages as an operator watches them: a
// client that connects after the page opened appears in the table, the
// kill switch works from its button, and a request through the tunnel
// appears in the traffic tail and the charts.
func TestDashboardOpsPagesInBrowser(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	b := newBrowser(t, 1280, 800)
	b.login(t, s, servertest.Token)
	b.open(t, s.URL+"/aperio/ui/clients", "#clients-table")

	// The page is open and following the stream before the agent starts.
	b.waitText(t, "#live-state", "Live")
	if got := b.text(t, "#clients-table tbody"); got != "None yet." {
		t.Fatalf("clients table before any client = %q, want None yet.", got)
	}
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from the backend")
	}))
	cfg := servertest.AgentConfig(s, servertest.Service(backend.URL))
	cfg.Name = "browser-agent"
	servertest.StartAgent(t, s, cfg)
	b.waitText(t, "#clients-table tbody", "browser-agent")
	b.waitText(t, "#clients-table tbody", servertest.AppHost)
	// Its service announces no access control: the server's default.
	b.waitText(t, `#clients-table td[data-cell="access"]`, "server default")
	// The client's release, drawn by clients.js from GET /clients.
	b.waitText(t, `#clients-table td[data-cell="version"]`, buildinfo.Version())
	b.screenshot(t, "clients")

	// Disable it from its button (the confirmation accepted), see it
	// disabled, and enable it again.
	b.acceptConfirms(t)
	b.click(t, `#clients-table button[data-action="disable"]`, ".notice.done")
	b.waitText(t, "#clients-table tbody", "Enable")
	b.click(t, `#clients-table button[data-action="enable"]`, ".notice.done")
	b.waitText(t, "#clients-table tbody", "Disable")

	// A request through the tunnel appears in the traffic tail.
	b.open(t, s.URL+"/aperio/ui/traffic", "#tail-table")
	b.waitText(t, "#live-state", "Live")
	b.waitText(t, "#tail", "Waiting for requests")
	visitor := servertest.NewVisitor(t, s)
	if status, body := servertest.Get(t, visitor, s, servertest.AppHost, "/through-the-tunnel"); status != http.StatusOK {
		t.Fatalf("GET through the tunnel = %d %q", status, body)
	}
	b.waitText(t, "#tail", "/through-the-tunnel")
	b.waitText(t, "#tail", servertest.AppHost)
	if b.has(t, "#tail-waiting") {
		t.Errorf("the tail still says it waits for requests after one arrived")
	}
	b.waitAttr(t, "#chart-rps", "aria-label", servertest.AppHost)
	b.screenshot(t, "traffic")

	// Pause holds new rows back; resume shows them.
	b.click(t, "#tail-pause", "")
	b.waitText(t, "#live-state", "Paused")
	if status, _ := servertest.Get(t, visitor, s, servertest.AppHost, "/while-paused"); status != http.StatusOK {
		t.Fatalf("GET while paused = %d", status)
	}
	b.waitText(t, "#live-state", "1 new while paused")
	if b.has(t, `#tail tr[data-path="/while-paused"]`) {
		t.Errorf("a paused tail shows a new request")
	}
	b.click(t, "#tail-pause", "")
	b.waitText(t, "#tail", "/while-paused")

	// The overview counts the client and the traffic, at desktop and at
	// phone width.
	b.open(t, s.URL+"/aperio/", "#overview-cards")
	b.waitText(t, "#clients-count", "1")
	b.waitText(t, "#hosts-table", servertest.AppHost)
	b.screenshot(t, "overview")
	b.viewport(t, 390, 844)
	b.open(t, s.URL+"/aperio/", "#overview-cards")
	b.waitText(t, "#hosts-table", servertest.AppHost)
	b.screenshot(t, "overview-phone")
	b.noErrors(t)
}
