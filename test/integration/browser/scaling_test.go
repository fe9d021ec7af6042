package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/chromedp/chromedp"
)

// TestDashboardScalingInBrowser: a client declares a scaling block; the
// master logs in, finds the record on the Autoscaling page, opens its
// detail, sees the chart of its samples appear and follow the samples
// live, and disarms the record.
func TestDashboardScalingInBrowser(t *testing.T) {
	t.Parallel()
	var hookCalls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookCalls.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)
	// Requests for /hold stay in flight until release closes, so the pool
	// shows a utilization the page must follow.
	release := make(chan struct{})
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	}))
	var released sync.Once
	releaseAll := func() { released.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // before the backend closes

	cfg := servertest.Config(t)
	cfg.ScalingEnabled = true
	cfg.Outbound.AllowHTTP = true    // the test provider is plain http…
	cfg.Outbound.AllowPrivate = true // …on loopback
	s := servertest.Start(t, cfg, nil, nil)
	agentCfg := servertest.AgentConfig(s, servertest.Service(backend.URL))
	agentCfg.MaxConcurrent = 4
	agentCfg.Scaling = &config.Scaling{URL: hook.URL + "/scale", Min: 1, Max: 3, ColdStart: 30 * time.Second,
		TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute}
	servertest.StartAgent(t, s, agentCfg)

	// Wait for the record through the API, so the page has one to show.
	visitor := servertest.NewVisitor(t, s)
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		req := servertest.NewRequest(t, t.Context(), s, "GET", "admin.localhost", apitype.Prefix+"/scaling", nil)
		req.Header.Set("Authorization", "Bearer "+servertest.Token)
		_, body := servertest.Do(t, visitor, req)
		var recs []apitype.ScalingRecord
		if err := json.Unmarshal([]byte(body), &recs); err != nil {
			return false, fmt.Sprintf("GET /scaling = %s (%v)", body, err)
		}
		return len(recs) == 1 && recs[0].ID != "" && recs[0].Instances == 1, "GET /scaling = " + body
	})

	b := newBrowser(t, 1280, 800)
	b.login(t, s, servertest.Token)
	b.click(t, `nav a[href="/aperio/ui/scaling"]`, "#scaling-list")
	row := b.text(t, "#scaling-list tbody tr")
	provider := strings.TrimPrefix(hook.URL, "http://")
	for _, want := range []string{servertest.AppHost, provider, "1–3", "armed"} {
		if !strings.Contains(row, want) {
			t.Errorf("the record's row %q lacks %q", row, want)
		}
	}
	if strings.Contains(row, "/scale") {
		t.Errorf("the row %q shows the hook URL's path", row)
	}
	b.screenshot(t, "scaling-list")

	b.click(t, "#scaling-list tbody a", "#scaling-detail")
	if got := b.text(t, `#scaling-detail [data-field="instances"]`); got != "1" {
		t.Errorf("instances on the detail = %q, want 1", got)
	}
	// The server samples the pool once a second: the chart is there, or
	// the script reloads the page when the first samples arrive.
	b.waitText(t, "#scaling-chart", "Target 80%")
	// The script follows the samples: the axis' last time moves on.
	// (SVG text has no innerText, which b.text reads.)
	end := b.eval(t, `document.getElementById("scaling-end").textContent`)
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	moved := `(() => { const e = document.getElementById("scaling-end"); return !!e && JSON.stringify(e.textContent) !== ` + jsString(end) + `; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](moved, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatalf("the chart's last sample stayed at %s: %v", end, err)
	}
	if got := b.eval(t, `document.querySelectorAll("#scaling-lines polyline").length`); got != "1" {
		t.Errorf("the chart has %s polylines, want 1", got)
	}
	b.waitText(t, "#scaling-live", "Live")

	// Three of the client's four slots busy: the figures follow live
	// (75%, below the 80% target, so no call).
	const held = 3
	done := make(chan error, held)
	for range held {
		req := servertest.NewRequest(t, t.Context(), s, "GET", servertest.AppHost, "/hold", nil)
		go func() {
			status, _, err := servertest.Fetch(visitor, req)
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("status %d", status)
			}
			done <- err
		}()
	}
	b.waitText(t, `#scaling-detail [data-field="inflight"]`, "3")
	b.waitText(t, `#scaling-detail [data-field="utilization"]`, "75%")
	b.screenshot(t, "scaling")
	releaseAll()
	for range held {
		if err := servertest.Wait(t, done, servertest.WaitFor, "a held request"); err != nil {
			t.Errorf("held request: %v", err)
		}
	}

	// Disarm, confirming the question data-confirm asks.
	b.acceptConfirms(t)
	b.click(t, "#disarm", ".notice.done")
	b.waitText(t, ".notice.done", "disarmed")
	if loc := b.location(t); !strings.HasSuffix(loc, "/aperio/ui/scaling?done=disarm") {
		t.Errorf("after the disarm the browser is at %s, want the list", loc)
	}
	b.noErrors(t)
	if n := hookCalls.Load(); n != 0 {
		t.Errorf("provider calls = %d, want none (the pool is at min and idle)", n)
	}
}
