package server

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// memAudit is an events.Auditor that keeps entries in memory.
type memAudit struct {
	mu  sync.Mutex // guards got
	got []store.AuditEntry
}

func (m *memAudit) AppendAudit(_ context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, e)
	return e, nil
}

func (m *memAudit) entries() []store.AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.AuditEntry(nil), m.got...)
}

// TestAuthAuditSampled: a flood of refusals for one hostname is one
// auth_denied entry, with a bounded detail that names the hostname and
// never blocks the caller (nothing drains the queue while it runs); the
// next interval's entry says how many were left out.
func TestAuthAuditSampled(t *testing.T) {
	synctest.Test(t, testAuthAuditSampled)
}

func testAuthAuditSampled(t *testing.T) {
	audit := &memAudit{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	va := &visitorAccess{events: events.New(events.Config{Audit: audit, Now: clock, Queue: 8})}
	d := router.AccessDenial{OrgID: "org-1", Host: "app.test", Path: "/" + strings.Repeat("x", 4000), Visitor: netip.MustParseAddr("203.0.113.7"), Methods: "basic", Status: 401, Reason: "basic: wrong password"}
	const flood = 1000
	for range flood {
		va.authDenied(d) // Run is not running: a queued event would block here if Offer waited
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- va.events.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	waitEntries := func(n int) []store.AuditEntry {
		t.Helper()
		synctest.Wait() // Run has written what it was given, and waits for more
		es := audit.entries()
		if len(es) != n {
			t.Fatalf("%d audit entries, want %d: %+v", len(es), n, es)
		}
		return es
	}
	es := waitEntries(1)
	if e := es[0]; e.Event != apitype.EventAuthDenied || e.OrgID != "org-1" || e.Hostname != "app.test" || len(e.Detail) > maxAuditDetail+len("…") || !strings.Contains(e.Detail, "app.test/xxx") {
		t.Fatalf("entry = %+v, want one auth_denied of org-1 for app.test with a bounded detail", e)
	}
	mu.Lock()
	now = now.Add(events.DefaultSampleInterval)
	mu.Unlock()
	va.authDenied(d)
	es = waitEntries(2)
	if want := "(999 more refusals since the last entry, not audited)"; !strings.Contains(es[1].Detail, want) {
		t.Errorf("second entry's detail = %q, want it to say %s", es[1].Detail, want)
	}
}
