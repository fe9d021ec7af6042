package gateway

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/router"
)

// TestAuthAuditSampled: a flood of refusals for one hostname queues at
// most the per-minute budget, a flood over many hostnames at most the
// queue, and neither ever blocks the caller; what is left out is counted.
func TestAuthAuditSampled(t *testing.T) {
	a := newAuthAuditor(nil, slog.New(slog.DiscardHandler))
	d := router.AccessDenial{Host: "app.test", Path: "/" + strings.Repeat("x", 4000), Visitor: netip.MustParseAddr("203.0.113.7"), Methods: "basic", Status: 401, Reason: "basic: wrong password"}
	for range 3 * maxRefusalAudits {
		a.denied(d) // nothing drains the queue: it must not block
	}
	if n := len(a.queue); n != maxRefusalAudits {
		t.Fatalf("queued %d entries for one hostname, want the budget %d", n, maxRefusalAudits)
	}
	e := <-a.queue
	if e.Event != "auth_denied" || len(e.Detail) > maxAuditDetail+len("…") || !strings.Contains(e.Detail, "app.test/xxx") {
		t.Fatalf("entry = %+v, want auth_denied with a bounded detail", e)
	}
	for i := range 2 * authAuditQueue {
		d.Host = "h" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + ".test"
		a.denied(d)
	}
	if n := len(a.queue); n != authAuditQueue {
		t.Fatalf("queued %d entries, want the queue's bound %d", n, authAuditQueue)
	}
	if a.dropped.Load() == 0 {
		t.Fatal("refusals past the full queue were not counted")
	}
}
