package gateway_test

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestScalingDeclarationRefusedMinAboveMax: a block whose min is above
// its max is refused at declaration: no record, a notice to the client,
// and one scaling_refused audit entry however many heartbeats repeat it.
func TestScalingDeclarationRefusedMinAboveMax(t *testing.T) {
	h := newScalingHarness(t)
	tok := h.token(t, h.orgB, "b.example.net")
	block := &tunnel.Scaling{URL: h.hook.URL + "/hook", Min: 3, Max: 2, ColdStartMS: 1000,
		TargetUtilization: 0.8, WindowMS: 1000, CooldownMS: 60_000}
	c := h.clientBlock(t, tok, block, true, "b.example.net")
	c.announceNow(t)
	c.announceNow(t) // a heartbeat repeats the refused declaration
	h.wantRecords(t)
	c.wantNotice(t, "scaling declaration for b.example.net refused: autoscale: invalid scaling block for b.example.net: max 2 is below min 3")
	entries := auditEvents(t, h.srv, "scaling_refused")
	if len(entries) != 1 {
		t.Fatalf("scaling_refused audit entries = %v, want exactly 1 for two announcements", entries)
	}
	e := entries[0]
	if e["hostname"] != "b.example.net" || !strings.Contains(e["detail"].(string), "max 2 is below min 3") ||
		!strings.HasPrefix(e["actor"].(string), "token:") {
		t.Errorf("scaling_refused entry = %v, want hostname b.example.net, the reason, and the token as actor", e)
	}
}
