// Package browser holds the dashboard's browser tests: each starts a
// whole stack in process (internal/server/servertest: a gateway on
// 127.0.0.1:0, agents, backends) and drives the embedded dashboard in
// headless Chromium through the DevTools protocol (chromedp): logging in,
// the pages, live updates, accessibility, no Content-Security-Policy
// violation or script error. The package has no code of its own; its
// tests run in plain go test (make test runs them), or alone with
//
//	go test -race ./test/integration/browser/
//
// They need Debian's chromium: without it they skip, and under CI=true
// they fail. Screenshots go to build/screenshots (or $APERIO_SCREENSHOTS).
package browser
