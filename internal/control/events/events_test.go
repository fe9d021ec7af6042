package events

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// fakeAudit records entries, or fails when err is set.
type fakeAudit struct {
	mu   sync.Mutex // guards the following fields
	got  []store.AuditEntry
	err  error
	ctxs []error // each append's ctx.Err()
}

func (f *fakeAudit) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxs = append(f.ctxs, ctx.Err())
	if f.err != nil {
		return store.AuditEntry{}, f.err
	}
	f.got = append(f.got, e)
	return e, nil
}

func (f *fakeAudit) entries() []store.AuditEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.AuditEntry(nil), f.got...)
}

// fakeSink records events, and whether the audit entry was already
// written when each arrived.
type fakeSink struct {
	audit   *fakeAudit
	mu      sync.Mutex // guards the following fields
	got     []Event
	audited []int
}

func (s *fakeSink) Publish(e Event) {
	s.audit.mu.Lock()
	n := len(s.audit.got)
	s.audit.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, e)
	s.audited = append(s.audited, n)
}

func (s *fakeSink) events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.got...)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestEmitAuditsThenPublishes: the entry is written before the event is
// published, stamped by the clock when At is zero, with every field; a
// cancelled ctx still writes it; a failed write still publishes.
func TestEmitAuditsThenPublishes(t *testing.T) {
	audit := &fakeAudit{}
	sink := &fakeSink{audit: audit}
	em := New(Config{Audit: audit, Sink: sink, Now: func() time.Time { return t0 }})
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the caller has gone: the change happened all the same
	em.Emit(ctx, Event{Kind: apitype.EventTokenCreated, OrgID: "org-1", Actor: "master", Hostname: "a.test", Detail: "token tok_1"})
	want := store.AuditEntry{At: t0, OrgID: "org-1", Event: apitype.EventTokenCreated, Actor: "master", Hostname: "a.test", Detail: "token tok_1"}
	if es := audit.entries(); len(es) != 1 || !cmp.Equal(es[0], want) {
		t.Fatalf("audit = %+v, want %+v", es, want)
	}
	if audit.ctxs[0] != nil {
		t.Errorf("append ran with ctx error %v, want it detached from the caller's cancellation", audit.ctxs[0])
	}
	if evs := sink.events(); len(evs) != 1 || !evs[0].At.Equal(t0) || sink.audited[0] != 1 {
		t.Fatalf("published %+v after %v entries, want one event stamped %s after its entry", evs, sink.audited, t0)
	}
	audit.err = errors.New("disk full")
	em.Emit(t.Context(), Event{Kind: apitype.EventTokenRevoked, OrgID: "org-1"})
	if evs := sink.events(); len(evs) != 2 || evs[1].Kind != apitype.EventTokenRevoked {
		t.Errorf("published %+v, want the revoke published although its entry was lost", evs)
	}
}

// TestOfferNeverBlocks: with nothing running Run, Offer fills the queue,
// then drops and counts; Run then writes the queued events, the first
// saying how many were dropped.
func TestOfferNeverBlocks(t *testing.T) {
	synctest.Test(t, testOfferNeverBlocks)
}

func testOfferNeverBlocks(t *testing.T) {
	audit := &fakeAudit{}
	em := New(Config{Audit: audit, Queue: 2})
	for i := range 5 {
		ok := em.Offer(Event{Kind: apitype.EventClientConnected, OrgID: "org-1"})
		if want := i < 2; ok != want {
			t.Errorf("Offer #%d = %t, want %t", i, ok, want)
		}
	}
	if got := em.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d, want 3", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	synctest.Wait() // Run has written the queued events and waits for more
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	es := audit.entries()
	if len(es) != 2 || !strings.Contains(es[0].Detail, "(3 events not audited: the event queue was full)") || strings.Contains(es[1].Detail, "not audited") {
		t.Errorf("entries = %+v, want two, the first reporting the 3 dropped", es)
	}
}

// TestAuthDeniedSampled: one auth_denied per organization and hostname
// per interval; the next says how many were left out; other kinds are
// never sampled; a visitor inventing hostnames cannot grow the sampler
// past its bound.
func TestAuthDeniedSampled(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	audit := &fakeAudit{}
	sink := &fakeSink{audit: audit}
	em := New(Config{Audit: audit, Sink: sink, Now: clock})
	deny := func(org, host string) {
		em.Emit(t.Context(), Event{Kind: apitype.EventAuthDenied, OrgID: org, Hostname: host, Detail: "refused"})
	}
	for range 50 {
		deny("org-1", "a.test")
		deny("org-2", "a.test") // another organization's hostname: its own budget
		deny("org-1", "b.test")
		em.Emit(t.Context(), Event{Kind: apitype.EventTokenRevoked, OrgID: "org-1"})
	}
	counts := map[string]int{}
	for _, e := range audit.entries() {
		counts[e.Event+" "+e.OrgID+" "+e.Hostname]++
	}
	want := map[string]int{"auth_denied org-1 a.test": 1, "auth_denied org-2 a.test": 1, "auth_denied org-1 b.test": 1, "token_revoked org-1 ": 50}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d entries, want %d", k, counts[k], v)
		}
	}
	mu.Lock()
	now = now.Add(DefaultSampleInterval - time.Nanosecond)
	mu.Unlock()
	deny("org-1", "a.test")
	mu.Lock()
	now = now.Add(time.Nanosecond)
	mu.Unlock()
	deny("org-1", "a.test")
	evs := sink.events()
	last := evs[len(evs)-1]
	if last.Fields["suppressed"] != int64(50) || !strings.Contains(last.Detail, "(50 more refusals") {
		t.Errorf("next interval's event = %+v, want suppressed 50 (49 in the first interval, one just before its end)", last)
	}

	// Inventing hostnames: the sampler stays bounded, and refusing for
	// want of room is counted, not lost.
	for i := range maxSampleKeys + 100 {
		deny("org-3", "h"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676%26))+".test")
	}
	em.sample.mu.Lock()
	n, refused := len(em.sample.last), em.sample.refused
	em.sample.mu.Unlock()
	if n > maxSampleKeys {
		t.Errorf("sampler holds %d keys, want at most %d", n, maxSampleKeys)
	}
	if refused == 0 {
		t.Error("hostnames refused for want of room were not counted")
	}
}

// TestSampledDetailBounded: a visitor's long path cannot make an
// auth_denied entry long.
func TestSampledDetailBounded(t *testing.T) {
	audit := &fakeAudit{}
	em := New(Config{Audit: audit})
	em.Emit(t.Context(), Event{Kind: apitype.EventAuthDenied, OrgID: "o", Hostname: "h", Detail: strings.Repeat("p", 100_000)})
	if es := audit.entries(); len(es) != 1 || len(es[0].Detail) > maxDetailBytes+len("…") {
		t.Errorf("entry detail is %d bytes, want at most %d", len(es[0].Detail), maxDetailBytes+len("…"))
	}
}
