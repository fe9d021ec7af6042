package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestScalingDeclarationRefusedMinAboveMax: a block whose min is above
// its max is refused at declaration: no record, a notice to the client,
// and one scaling_refused audit entry however many heartbeats repeat it.
func TestScalingDeclarationRefusedMinAboveMax(t *testing.T) {
	t.Parallel()
	h := newScalingHarness(t)
	tok := h.token(t, h.orgB, "b.example.net")
	block := &tunnel.Scaling{URL: h.hook.URL + "/hook", Min: 3, Max: 2, ColdStart: time.Second,
		TargetUtilization: 0.8, Window: time.Second, Cooldown: time.Minute}
	c := h.clientBlock(t, tok, block, true, "b.example.net")
	c.announceNow(t)
	c.announceNow(t) // a heartbeat repeats the refused declaration
	h.wantRecords(t)
	c.wantNotice(t, "scaling declaration for b.example.net refused: autoscale: invalid scaling block for b.example.net: max 2 is below min 3")
	entries := h.auditAfterLeave(t, c, "scaling_refused")
	if len(entries) != 1 {
		t.Fatalf("scaling_refused audit entries = %v, want exactly 1 for two announcements", entries)
	}
	e := entries[0]
	if e["hostname"] != "b.example.net" || !strings.Contains(e["detail"].(string), "max 2 is below min 3") ||
		!strings.HasPrefix(e["actor"].(string), "token:") {
		t.Errorf("scaling_refused entry = %v, want hostname b.example.net, the reason, and the token as actor", e)
	}
}

// TestScalingDeclarationRefusedByFence: a hook URL the server's outbound
// policy refuses (plain http without scaling_allow_http) is refused when
// the client declares it, not when a visitor arrives: a notice naming the
// policy's reason, a scaling_refused audit entry, the bind listed as
// refused with that reason and no record, and a visitor is not held for a
// call that could never be made.
func TestScalingDeclarationRefusedByFence(t *testing.T) {
	t.Parallel()
	h := newScalingHarnessWith(t, func(c *server.Config) { c.Outbound.AllowHTTP = false })
	tok := h.token(t, h.orgB, "b.example.net")
	c := h.client(t, tok, "b.example.net")
	c.announceNow(t)
	const reason = "url is refused by the server's outbound policy: http is not permitted, only https"
	c.wantNotice(t, "scaling declaration for b.example.net refused: autoscale: invalid scaling block for b.example.net: "+reason)
	status, body := adminCall(t, h.visitor, h.srv, "GET", "/scaling", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /scaling = %d %s", status, body)
	}
	var rs []apitype.ScalingRecord
	if err := json.Unmarshal([]byte(body), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].ID != "" || rs[0].Hostname != "b.example.net" || !rs[0].Disarmed || !strings.Contains(rs[0].Refused, reason) {
		t.Fatalf("GET /scaling = %+v, want b.example.net listed without a record, disarmed, refused with %q", rs, reason)
	}
	if entries := h.auditAfterLeave(t, c, "scaling_refused"); len(entries) != 1 || !strings.Contains(entries[0]["detail"].(string), reason) {
		t.Errorf("scaling_refused audit entries = %v, want one with %q", entries, reason)
	}
	waitClients(t, h.visitor, h.srv, 0)
	h.visitNeverCalls(t, "b.example.net", "/hook")
}
