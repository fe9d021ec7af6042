package admin_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/control/webhook"
)

// fakeEvents records the maintenance events the API emits.
type fakeEvents struct {
	mu  sync.Mutex // guards got
	got []webhook.MaintenanceEvent
}

func (f *fakeEvents) Publish(e events.Event) {
	m, ok := e.Data.(webhook.MaintenanceEvent)
	if !ok || m.Type != e.Kind {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, m)
}

func (f *fakeEvents) events() []webhook.MaintenanceEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]webhook.MaintenanceEvent(nil), f.got...)
}

// TestMaintenanceReasonAndTTL: the reason and the end are stored and
// listed, a record past its end is not listed, and each change is emitted
// for webhooks with its organization.
func TestMaintenanceReasonAndTTL(t *testing.T) {
	ev := &fakeEvents{}
	f := newFixture(t)
	f = f.withConfig(t, admin.Config{Events: ev})
	a, b := f.org(t, "a"), f.org(t, "b")
	opA := f.key(t, a, admin.RoleOperator)
	f.own(t, a, "*.a.example.com")
	f.own(t, b, "b.example.com")

	f.expect(t, "PUT", "/maintenance/*.a.example.com", opA.Secret, `{"reason":"db upgrade","ttl_seconds":3600}`, http.StatusNoContent, nil)
	f.expect(t, "PUT", "/maintenance/b.example.com", masterToken, `{"org_id":"`+b+`"}`, http.StatusNoContent, nil)
	var list []admin.Maintenance
	f.expect(t, "GET", "/maintenance", opA.Secret, "", http.StatusOK, &list)
	if len(list) != 1 || list[0].Hostname != "*.a.example.com" || list[0].Reason != "db upgrade" || list[0].ExpiresAt == nil || list[0].ExpiresAt.Sub(list[0].Since) != time.Hour {
		t.Fatalf("GET /maintenance as a = %+v, want *.a.example.com with its reason, ending an hour after it began", list)
	}
	ends := *list[0].ExpiresAt

	f.clock.Advance(time.Hour)
	f.expect(t, "GET", "/maintenance", opA.Secret, "", http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("GET /maintenance after the end = %+v, want none", list)
	}
	f.expect(t, "DELETE", "/maintenance/b.example.com", masterToken, "", http.StatusNoContent, nil)

	got := ev.events()
	for i := range got {
		got[i].At = time.Time{}
	}
	want := []webhook.MaintenanceEvent{
		{Type: webhook.EventMaintenanceOn, OrgID: a, Hostname: "*.a.example.com", By: "key:" + opA.ID, Reason: "db upgrade", ExpiresAt: &ends},
		{Type: webhook.EventMaintenanceOn, OrgID: b, Hostname: "b.example.com", By: "master"},
		{Type: webhook.EventMaintenanceOff, OrgID: b, Hostname: "b.example.com", By: "master"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("emitted events mismatch (-want +got):\n%s", diff)
	}
}
