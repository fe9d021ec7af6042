package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestMaintenanceEventsGoToTheirSubscriptions: a subscription naming
// maintenance_on gets it, signed; a scaling-only one gets nothing; the
// other organization's gets only its own. The lister returns every
// subscription, so the dispatcher's own filter is what is tested.
func TestMaintenanceEventsGoToTheirSubscriptions(t *testing.T) {
	onA, scalingA, onB := newReceiver(t, 204), newReceiver(t, 204), newReceiver(t, 204)
	subs := []Subscription{
		{ID: "wh-a-maint", OrgID: "org-a", URL: onA.URL, Secret: "sa", Events: []string{EventMaintenanceOn, EventMaintenanceOff}},
		{ID: "wh-a-scaling", OrgID: "org-a", URL: scalingA.URL, Events: []string{apitype.EventScalingRequested}},
		{ID: "wh-b-maint", OrgID: "org-b", URL: onB.URL, Secret: "sb", Events: []string{EventMaintenanceOn}},
	}
	h := start(t, allLister{subs}, Config{Workers: 1})
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	ends := at.Add(time.Hour)
	h.d.EmitMaintenance(t.Context(), MaintenanceEvent{Type: EventMaintenanceOn, At: at, OrgID: "org-a", Hostname: "*.a.example.com", By: "key alice", Reason: "upgrade", ExpiresAt: &ends})
	h.d.EmitMaintenance(t.Context(), MaintenanceEvent{Type: EventMaintenanceOn, At: at, OrgID: "org-b", Hostname: "b.example.com", By: "master"})
	h.d.EmitMaintenance(t.Context(), MaintenanceEvent{Type: EventMaintenanceOff, At: at, OrgID: "org-b", Hostname: "b.example.com", By: "master"}) // org-b's sub does not name it
	// A sentinel, delivered last by the one worker.
	h.d.Emit(t.Context(), scalingEvent(apitype.EventScalingRequested))
	e := scalingEvent(apitype.EventScalingRequested)
	e.OrgID = "org-a"
	h.d.Emit(t.Context(), e)
	for range 3 {
		waitLog(t, h.logs, "webhook delivered")
	}

	if got := scalingA.requests(); len(got) != 1 || got[0].header.Get(HeaderEvent) != apitype.EventScalingRequested {
		t.Errorf("scaling-only subscription got %d requests, want only the scaling event", len(got))
	}
	check := func(name string, rcv *receiver, secret string, want MaintenancePayload) {
		t.Helper()
		reqs := rcv.requests()
		if len(reqs) != 1 {
			t.Fatalf("%s got %d requests, want 1", name, len(reqs))
		}
		r := reqs[0]
		if r.header.Get(HeaderEvent) != EventMaintenanceOn {
			t.Errorf("%s event = %q, want %s", name, r.header.Get(HeaderEvent), EventMaintenanceOn)
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(r.body)
		if got, want := r.header.Get(HeaderSignature), "sha256="+hex.EncodeToString(m.Sum(nil)); got != want {
			t.Errorf("%s signature = %q, want %q", name, got, want)
		}
		var got MaintenancePayload
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatalf("%s body %q: %v", name, r.body, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s payload mismatch (-want +got):\n%s", name, diff)
		}
	}
	check("org-a's maintenance subscription", onA, "sa", MaintenancePayload{Event: EventMaintenanceOn, At: at, OrgID: "org-a", Hostname: "*.a.example.com",
		Detail: MaintenanceDetail{By: "key alice", Reason: "upgrade", ExpiresAt: &ends}})
	check("org-b's maintenance subscription", onB, "sb", MaintenancePayload{Event: EventMaintenanceOn, At: at, OrgID: "org-b", Hostname: "b.example.com",
		Detail: MaintenanceDetail{By: "master"}})
}
