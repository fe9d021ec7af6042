package browser_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/chromedp/chromedp"
)

// The dashboard's browser tests drive Debian's chromium, headless, through
// the DevTools protocol (chromedp). .ci/run installs it; a developer's
// machine without it skips these tests, CI (CI=true) fails instead.
//
// Tests use the browser's small vocabulary below (open, fill, click,
// waitText, ...), each step bounded by browserWait, and end with noErrors:
// a Content-Security-Policy violation or an exception in a page's script
// fails the test.

// TestMain stops the shared Chromium (closeChromium) before
// servertest.Main's leak check: its goroutines are joined there, not in a
// test's cleanup.
func TestMain(m *testing.M) { servertest.Main(m, closeChromium) }

// browserWait bounds each step of a browser test: a page load, a live
// update arriving over the stream.
const browserWait = 20 * time.Second

// chromiumPath returns the browser to drive, or "" when none is installed.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromium is the test binary's one headless browser process, started by
// the first browser test and stopped by TestMain (closeChromium) before
// the leak check. Each test gets a tab in a browser context of its own
// (cookies and storage apart from the others'): starting a browser per
// test cost some 3 s of the test's time each, more under load.
var chromium struct {
	once sync.Once
	dir  string          // the browser's profile directory
	ctx  context.Context // the browser's first tab; its children are tests' tabs
	stop func()          // cancels the browser and its allocator
	err  error           // why it did not start
}

// startChromium starts the shared browser at path.
func startChromium(path string) {
	dir, err := os.MkdirTemp("", "aperio-chromium-")
	if err != nil {
		chromium.err = err
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.DisableGPU,
		chromedp.UserDataDir(dir),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	chromium.dir, chromium.ctx = dir, ctx
	chromium.stop = func() {
		// Cancel on the first tab closes the browser and waits for its
		// process.
		chromedp.Cancel(ctx)
		cancelCtx()
		cancelAlloc()
		os.RemoveAll(dir)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		chromium.err = err
	}
}

// closeChromium stops the shared browser, if a test started it.
func closeChromium() {
	if chromium.stop != nil {
		chromium.stop()
	}
}

// browser is a headless Chromium tab for one test, and the errors its
// pages logged (CSP violations among them).
type browser struct {
	ctx context.Context
	mu  sync.Mutex // guards errs
	// errs are the console errors and uncaught exceptions seen so far.
	errs []string
}

// newBrowser opens a tab with a width×height viewport for t, in a browser
// context of its own; t.Cleanup closes both.
func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs it")
		}
		t.Skip("chromium is not installed (apt-get install chromium); CI runs this test")
	}
	chromium.once.Do(func() { startChromium(path) })
	if chromium.err != nil {
		t.Fatalf("start chromium: %v", chromium.err)
	}
	ctx, cancelCtx := chromedp.NewContext(chromium.ctx, chromedp.WithNewBrowserContext())
	b := &browser{ctx: ctx}
	// Open the tab, then follow its console until the test ends.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height)), chromedp.Navigate("about:blank")); err != nil {
		cancelCtx()
		t.Fatalf("open a chromium tab: %v", err)
	}
	cctx, stopConsole := context.WithCancel(ctx)
	msgs := chromedp.Console(cctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				b.mu.Lock()
				b.errs = append(b.errs, m.String())
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		stopConsole()
		<-followed
		// Cancel closes the tab and disposes of its browser context.
		if err := chromedp.Cancel(ctx); err != nil {
			t.Logf("close chromium tab: %v", err)
		}
		cancelCtx()
	})
	return b
}

// do runs actions, the step bounded by browserWait.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		err := chromedp.Do(ctx, actions...)
		if err == nil {
			return
		}
		// A page script that replaced the element between the query and
		// the action (a live table redrawn) leaves a stale node id: the
		// action did not happen, so the step is run again.
		if attempt < 3 && strings.Contains(err.Error(), "No node with given id") {
			continue
		}
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// open loads url and waits for the element css to be visible.
func (b *browser) open(t *testing.T, url, css string) {
	t.Helper()
	b.do(t, "open "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(css)))
}

// fill replaces the value of the input css with value.
func (b *browser) fill(t *testing.T, css, value string) {
	t.Helper()
	b.do(t, "fill "+css, chromedp.WaitVisible(chromedp.CSS(css)), chromedp.SetValue(chromedp.CSS(css), value))
}

// click clicks the element css, then waits for the element next (""
// for none) to be visible: the page the click leads to.
func (b *browser) click(t *testing.T, css, next string) {
	t.Helper()
	steps := []chromedp.Action[chromedp.Void]{chromedp.WaitVisible(chromedp.CSS(css)), chromedp.Click(chromedp.CSS(css))}
	if next != "" {
		steps = append(steps, chromedp.WaitVisible(chromedp.CSS(next)))
	}
	b.do(t, "click "+css, steps...)
}

// text returns the visible text of the first element css matches.
func (b *browser) text(t *testing.T, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
		if err == nil {
			return strings.TrimSpace(s)
		}
		// The page redrew the element between the query and the read
		// (a live update): the node id is stale, so read it again.
		if attempt < 3 && strings.Contains(err.Error(), "No node with given id") {
			continue
		}
		t.Fatalf("browser: text of %s: %v", css, err)
	}
}

// has reports whether an element css matches exists now.
func (b *browser) has(t *testing.T, css string) bool {
	t.Helper()
	return b.eval(t, "document.querySelector("+jsString(css)+") !== null") == "true"
}

// eval evaluates a JavaScript expression and returns its value as JSON.
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		t.Fatalf("browser: eval %s: %v", expr, err)
	}
	return string(v)
}

// waitText waits until the text of the element css contains want (the
// page updating itself, live, or the next page after a click), up to
// browserWait. It polls from Go, so a navigation in between is no error.
func (b *browser) waitText(t *testing.T, css, want string) {
	t.Helper()
	expr := "(() => { const e = document.querySelector(" + jsString(css) + "); return !!e && e.textContent.includes(" + jsString(want) + "); })()"
	deadline := time.Now().Add(browserWait)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("browser: waiting for %q in %s: not there after %v (last error %v; it reads %s)", want, css, browserWait, err,
				b.eval(t, "(document.querySelector("+jsString(css)+")||{}).textContent||''"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// location returns the tab's URL.
func (b *browser) location(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatalf("browser: location: %v", err)
	}
	return loc
}

// acceptConfirms makes the page's confirmations (a form's data-confirm)
// answer yes until the next page load.
func (b *browser) acceptConfirms(t *testing.T) {
	t.Helper()
	b.eval(t, "(() => { window.confirm = () => true; return true; })()")
}

// viewport resizes the page's viewport (a phone's width, say).
func (b *browser) viewport(t *testing.T, width, height int64) {
	t.Helper()
	b.do(t, "resize viewport", chromedp.EmulateViewport(width, height))
}

// noErrors fails t when a page logged an error (a CSP violation, a script
// exception) since the last call.
func (b *browser) noErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	errs := b.errs
	b.errs = nil
	b.mu.Unlock()
	for _, e := range errs {
		t.Errorf("browser logged an error: %s", e)
	}
}

// screenshot saves the whole page as build/screenshots/<name>.png (or
// under $APERIO_SCREENSHOTS), for docs/dashboard.md and for looking at a
// failure.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("APERIO_SCREENSHOTS")
	if dir == "" {
		root, err := filepath.Abs("../../..")
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "build", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\u2028", `\u2028`, "\u2029", `\u2029`, "<", `\x3c`)
	return `"` + r.Replace(s) + `"`
}
