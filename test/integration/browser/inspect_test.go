package browser_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// TestDashboardInspectInBrowser drives the inspector page in a real
// browser against a real server, tunnel and client: log in with the
// master token, start a capture of app.test through the form, watch a
// visitor's request appear in the live list, open it (redacted header,
// the cURL command), replay it and follow the link to the new entry.
func TestDashboardInspectInBrowser(t *testing.T) {
	t.Parallel()
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "saw "+string(body))
	})
	st := servertest.StartStack(t, backend, nil)
	b := newBrowser(t, 1280, 800)
	b.login(t, st.Server, servertest.Token)

	// Start a capture through the form.
	b.open(t, st.Server.URL+"/aperio/ui/inspect", "#start-form")
	b.fill(t, "#in-hostname", servertest.AppHost)
	b.fill(t, "#in-duration", "300")
	b.fill(t, "#in-body", "4")
	b.fill(t, "#in-redact", "X-Api-Key")
	b.click(t, "#start", "#captures")
	b.waitText(t, "[role=status]", "The capture was started.")
	b.waitText(t, "#captures", servertest.AppHost)
	b.waitText(t, "#captures", "X-Api-Key")
	b.screenshot(t, "inspect-captures")

	// The capture's page follows its requests live (inspect.js).
	b.click(t, `#captures a[href="/aperio/ui/inspect?hostname=`+servertest.AppHost+`"]`, "#requests")
	b.waitText(t, "#state", "recording")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := servertest.NewRequest(t, ctx, st.Server, "POST", servertest.AppHost, "/hello?x=1", strings.NewReader("it's <b>me</b>"))
	req.Header.Set("X-Api-Key", "visitor-secret")
	req.Header.Set("X-Note", "<script>alert(1)</script>")
	if resp, body := servertest.Do(t, st.Visitor, req); resp.StatusCode != http.StatusAccepted || body != "saw it's <b>me</b>" {
		t.Fatalf("visitor POST = %d %q, want 202 and the echo", resp.StatusCode, body)
	}
	b.waitText(t, "#requests tbody", "/hello?x=1")
	b.waitText(t, "#requests tbody", "202")
	b.noErrors(t)

	// Its detail: the redacted header, the visitor's markup as text, the
	// cURL command.
	b.click(t, "#requests tbody a", "#curl")
	curl := b.text(t, "#curl")
	for _, want := range []string{"curl", "/hello?x=1", "X-Note: <script>alert(1)</script>", "it'\\''s <b>me</b>"} {
		if !strings.Contains(curl, want) {
			t.Errorf("cURL text %q lacks %q", curl, want)
		}
	}
	if strings.Contains(curl, "visitor-secret") || strings.Contains(curl, "X-Api-Key") {
		t.Errorf("cURL text %q carries the redacted header", curl)
	}
	b.waitText(t, "#request-headers", "[redacted]")
	if b.has(t, "#request-headers script") {
		t.Errorf("a visitor's header became markup")
	}
	b.waitText(t, "#request-body", "it's <b>me</b>")
	b.waitText(t, "#entry-status", "202")
	b.waitText(t, "#timeline", "ms")

	// Replay it: a new entry, linked, marked as the replay of the first.
	b.click(t, "#replay", "#replayed-link")
	b.waitText(t, "#replayed", "202")
	newID := b.text(t, "#replayed-link")
	if !strings.HasPrefix(newID, "req_") {
		t.Fatalf("replayed entry id = %q", newID)
	}
	b.click(t, "#replayed-link", "#curl")
	b.waitText(t, "#entry-h", newID)
	b.waitText(t, "#entry", "Replay of")
	b.waitText(t, "#request-headers", "X-Aperio-Replay")
	b.screenshot(t, "inspect")

	// The capture's list shows both, the replay marked.
	b.open(t, st.Server.URL+"/aperio/ui/inspect?hostname="+servertest.AppHost, "#requests")
	b.waitText(t, "#requests tbody", "replay")
	if n := b.eval(t, "document.querySelectorAll('#requests tbody tr').length"); n != "2" {
		t.Errorf("the capture lists %s requests, want 2", n)
	}
	b.noErrors(t)
}
