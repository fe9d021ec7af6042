package autoscale

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/store"
)

// testOrg is the organization of the tests' records.
const testOrg = "org_1"

// fakeStore is an in-memory Store with the store's contract.
type fakeStore struct {
	mu       sync.Mutex
	recs     map[string]*Record // by ID
	nextID   int
	audit    []store.AuditEntry
	declares []declareCall
	fail     error // when set, every method returns it
	changes  chan store.Change
	leases   map[string]store.ScalingLease // by record ID
	feeds    []chan store.Change           // each clusterNode's change feed
	gen      int64                         // the last lease generation given
	gens     map[string]int64              // each record's latest lease generation
	// onRefused, when set, is called (without the fake's lock) when a
	// lease is refused because another holder's is live, before the
	// refusal returns: a test holds the refused attempt there.
	onRefused func(holder string)
}

// Clock is the fake store's clock: the bubble's.
func (s *fakeStore) Clock(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return time.Time{}, s.fail
	}
	return time.Now(), nil
}

// declareCall is one DeclareScaling the fake received.
type declareCall struct {
	rec   Record
	armer string
	rearm bool
}

func newFakeStore() *fakeStore {
	return &fakeStore{recs: map[string]*Record{}, leases: map[string]store.ScalingLease{}, gens: map[string]int64{}}
}

// emitLocked sends ch to every clusterNode's feed, as a shared database's
// change feed would.
func (s *fakeStore) emitLocked(ch store.Change) {
	for _, f := range s.feeds {
		select {
		case f <- ch:
		default:
			panic("fake store: change feed full")
		}
	}
}

// clusterNode is one server's view of a fakeStore shared by several
// controllers: a Store with a change feed of its own.
type clusterNode struct{ *fakeStore }

func (n clusterNode) Subscribe(ctx context.Context) <-chan store.Change {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := make(chan store.Change, 1024)
	n.feeds = append(n.feeds, ch)
	return ch
}

// leaseOf returns the lease of record id, if any.
func (s *fakeStore) leaseOf(id string) (store.ScalingLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	return l, ok
}

// AcquireScalingLease follows store.DB.AcquireScalingLease's contract,
// but for the calls-per-minute budget, which the store's conformance
// suite covers.
func (s *fakeStore) AcquireScalingLease(ctx context.Context, want store.ScalingLease, ttl time.Duration) (store.ScalingLease, Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return store.ScalingLease{}, Record{}, false, s.fail
	}
	if ttl <= 0 || ttl > store.MaxScalingLeaseTTL || want.Holder == "" || want.IdempotencyKey == "" {
		return store.ScalingLease{}, Record{}, false, fmt.Errorf("fake store: bad lease %+v for %v", want, ttl)
	}
	r := s.recs[want.RecordID]
	if r == nil {
		return store.ScalingLease{}, Record{}, false, notFound("scaling record " + want.RecordID)
	}
	now := time.Now()
	if r.Disarmed || (r.NextCallAt != nil && r.NextCallAt.After(now)) || (r.PenaltyUntil != nil && r.PenaltyUntil.After(now)) {
		return store.ScalingLease{}, clone(*r), false, nil
	}
	if h, ok := s.leases[want.RecordID]; ok {
		if h.ExpiresAt.After(now) && !h.ExpiresAt.After(now.Add(store.MaxScalingLeaseTTL)) && h.Holder != want.Holder {
			rc := clone(*r) // the answer as it stood when the store gave it
			if hook := s.onRefused; hook != nil {
				s.mu.Unlock()
				hook(want.Holder)
				s.mu.Lock()
			}
			return h, rc, false, nil
		}
		live := h.ExpiresAt.After(now)
		if h.Reason == want.Reason && h.Current == want.Current && h.Desired == want.Desired &&
			(live || now.Before(h.ExpiresAt.Add(h.ExpiresAt.Sub(h.AcquiredAt)))) {
			want.IdempotencyKey = h.IdempotencyKey
		}
	}
	want.AcquiredAt, want.ExpiresAt = now, now.Add(ttl)
	s.gen++
	want.Generation, want.CallsPerMinute = s.gen, 0
	s.gens[want.RecordID] = s.gen
	s.leases[want.RecordID] = want
	return want, clone(*r), true, nil
}

// clone copies r, slices and pointers included.
func clone(r Record) Record {
	r.ArmedBy = slices.Clone(r.ArmedBy)
	if r.LastCallAt != nil {
		t := *r.LastCallAt
		r.LastCallAt = &t
	}
	return r
}

func notFound(what string) error { return fmt.Errorf("fake store: %s: %w", what, store.ErrNotFound) }

// put stores r as is (as a previous server run would have), assigning an
// ID when it has none, and returns it.
func (s *fakeStore) put(r Record) Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ID == "" {
		s.nextID++
		r.ID = fmt.Sprintf("scl_%d", s.nextID)
	}
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = time.Now()
	}
	if len(r.ArmedBy) == 0 {
		r.ArmedBy = []string{"tok_0"}
	}
	c := clone(r)
	s.recs[r.ID] = &c
	return clone(r)
}

// byBindLocked finds the record of a bind.
func (s *fakeStore) byBindLocked(org, host, path string) *Record {
	var best *Record
	for _, r := range s.recs {
		if (org == "" || r.OrgID == org) && r.Hostname == host && r.Path == path {
			if best == nil || r.UpdatedAt.After(best.UpdatedAt) {
				best = r
			}
		}
	}
	return best
}

// get returns the record of a bind of testOrg, and whether there is one.
func (s *fakeStore) get(host string) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.byBindLocked(testOrg, host, "")
	if r == nil {
		return Record{}, false
	}
	return clone(*r), true
}

// auditEvents returns the audit log's event names, in order.
func (s *fakeStore) auditEvents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []string
	for _, e := range s.audit {
		es = append(es, e.Event)
	}
	return es
}

// auditEntries returns a copy of the audit log.
func (s *fakeStore) auditEntries() []store.AuditEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.audit)
}

// lastDeclare returns the last DeclareScaling received.
func (s *fakeStore) lastDeclare(t testing.TB) declareCall {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.declares) == 0 {
		t.Fatal("no DeclareScaling call")
	}
	return s.declares[len(s.declares)-1]
}

func (s *fakeStore) publish(ch store.Change) {
	if s.changes != nil {
		s.changes <- ch
	}
}

func (s *fakeStore) DeclareScaling(ctx context.Context, r Record, armer string, rearm bool) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return Record{}, false, s.fail
	}
	s.declares = append(s.declares, declareCall{clone(r), armer, rearm})
	// Like the real store: milliseconds only.
	r.ColdStart = r.ColdStart.Truncate(time.Millisecond)
	r.Window = r.Window.Truncate(time.Millisecond)
	r.Cooldown = r.Cooldown.Truncate(time.Millisecond)
	old := s.byBindLocked(r.OrgID, r.Hostname, r.Path)
	if old == nil {
		s.nextID++
		n := r
		n.ID = fmt.Sprintf("scl_%d", s.nextID)
		n.ArmedBy = []string{armer}
		n.Disarmed, n.ConsecutiveFailures, n.LastCallAt, n.LastReason, n.LastStatus = false, 0, nil, "", 0
		n.CreatedAt, n.UpdatedAt = time.Now(), time.Now()
		s.recs[n.ID] = &n
		s.emitLocked(store.Change{Kind: store.ChangeScalingUpdated, ID: n.ID, OrgID: n.OrgID, Hostname: n.Hostname})
		return clone(n), true, nil
	}
	changed := !(old.URL == r.URL && old.Secret == r.Secret && old.Min == r.Min && old.Max == r.Max &&
		old.ColdStart == r.ColdStart && old.Window == r.Window && old.Cooldown == r.Cooldown &&
		old.TargetUtilization == r.TargetUtilization)
	old.URL, old.Secret, old.Min, old.Max = r.URL, r.Secret, r.Min, r.Max
	old.ColdStart, old.Window, old.Cooldown = r.ColdStart, r.Window, r.Cooldown
	old.TargetUtilization, old.Conflict = r.TargetUtilization, r.Conflict
	if !slices.Contains(old.ArmedBy, armer) {
		old.ArmedBy = append(old.ArmedBy, armer)
	}
	if rearm {
		old.Disarmed, old.ConsecutiveFailures, old.NextCallAt = false, 0, nil
		if old.LastCallAt != nil {
			old.NextCallAt = new(old.LastCallAt.Add(old.Cooldown))
		}
	}
	old.UpdatedAt = time.Now()
	s.emitLocked(store.Change{Kind: store.ChangeScalingUpdated, ID: old.ID, OrgID: old.OrgID, Hostname: old.Hostname})
	return clone(*old), changed, nil
}

func (s *fakeStore) ScalingRecordByBind(ctx context.Context, orgID, hostname, path string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return Record{}, s.fail
	}
	r := s.byBindLocked(orgID, hostname, path)
	if r == nil {
		return Record{}, notFound("scaling record for " + hostname)
	}
	return clone(*r), nil
}

func (s *fakeStore) ListScalingRecords(ctx context.Context, orgID string) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	var rs []Record
	for _, r := range s.recs {
		if orgID == "" || r.OrgID == orgID {
			rs = append(rs, clone(*r))
		}
	}
	slices.SortFunc(rs, func(a, b Record) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.ID, b.ID))
	})
	return rs, nil
}

func (s *fakeStore) RecordScalingCall(ctx context.Context, id string, c store.ScalingCall) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return Record{}, s.fail
	}
	r := s.recs[id]
	if r == nil {
		return Record{}, notFound("scaling record " + id)
	}
	if c.Generation > 0 && s.gens[id] > c.Generation {
		return Record{}, fmt.Errorf("fake store: generation %d taken over by %d: %w", c.Generation, s.gens[id], store.ErrConflict)
	}
	at := c.At
	if at.IsZero() {
		at = time.Now()
	}
	if c.NextCallIn > 0 {
		c.NextCallAt = at.Add(c.NextCallIn)
	}
	if c.PenaltyFor > 0 {
		c.PenaltyUntil = at.Add(c.PenaltyFor)
	}
	r.LastCallAt, r.LastReason, r.LastStatus, r.LastError = &at, c.Reason, c.Status, c.Err
	r.ConsecutiveFailures, r.Disarmed = c.ConsecutiveFailures, c.Disarmed
	r.NextCallAt, r.PenaltyUntil = timeOrNil(c.NextCallAt), timeOrNil(c.PenaltyUntil)
	if l, ok := s.leases[id]; ok && c.Holder != "" && l.Holder == c.Holder {
		delete(s.leases, id)
	}
	kind := store.ChangeScalingCalled
	if c.Disarmed {
		kind = store.ChangeScalingDisarmed
	}
	s.emitLocked(store.Change{Kind: kind, ID: id, OrgID: r.OrgID, Hostname: r.Hostname})
	return clone(*r), nil
}

func (s *fakeStore) DeleteScalingRecord(ctx context.Context, orgID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	r := s.recs[id]
	if r == nil || (orgID != "" && r.OrgID != orgID) {
		return notFound("scaling record " + id)
	}
	delete(s.recs, id)
	delete(s.leases, id)
	s.emitLocked(store.Change{Kind: store.ChangeScalingDeleted, ID: id, OrgID: r.OrgID, Hostname: r.Hostname})
	return nil
}

func (s *fakeStore) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return store.AuditEntry{}, s.fail
	}
	e.ID = int64(len(s.audit) + 1)
	s.audit = append(s.audit, e)
	return e, nil
}

// feedStore is a fakeStore with a change feed, like *store.DB.
type feedStore struct{ *fakeStore }

func (s feedStore) Subscribe(ctx context.Context) <-chan store.Change { return s.changes }

// fakePool is a PoolView whose figures are functions of the time elapsed
// since the test began, so that what each sample sees is fixed by the
// fake clock and not by goroutine order.
type fakePool struct {
	start time.Time
	mu    sync.Mutex
	fns   map[bindKey]func(elapsed time.Duration) PoolStats
}

func newFakePool() *fakePool {
	return &fakePool{start: time.Now(), fns: map[bindKey]func(time.Duration) PoolStats{}}
}

// set scripts the pool of host (testOrg, no path).
func (p *fakePool) set(host string, fn func(elapsed time.Duration) PoolStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fns[bindKey{testOrg, host, ""}] = fn
}

// steady scripts a pool that never changes.
func (p *fakePool) steady(host string, st PoolStats) {
	p.set(host, func(time.Duration) PoolStats { return st })
}

func (p *fakePool) Pool(orgID, hostname, path string) PoolStats {
	p.mu.Lock()
	fn := p.fns[bindKey{orgID, hostname, path}]
	p.mu.Unlock()
	if fn == nil {
		return PoolStats{}
	}
	return fn(time.Since(p.start))
}

// pool returns the figures of n instances of max_concurrent 10 holding
// inflight permits, all primary and routable.
func pool(n, inflight int) PoolStats {
	return PoolStats{Instances: n, Capacity: 10 * n, Inflight: inflight, Routable: n}
}

// fakeCaller is a Caller that records each call, answers as scripted, and
// can hold calls until the test releases them.
type fakeCaller struct {
	mu       sync.Mutex
	calls    []madeCall
	answer   func(n int, c HookCall) (int, time.Duration, error) // n counts from 0; nil answers 200
	hold     chan struct{}                                       // when set, each call waits for a value (or ctx)
	inflight int
	peak     int
}

// madeCall is one call the provider saw.
type madeCall struct {
	at time.Time
	// span is the span context the call's ctx carried (a tracing Caller's
	// parent).
	span trace.SpanContext
	HookCall
}

func (f *fakeCaller) Call(ctx context.Context, c HookCall) (int, time.Duration, error) {
	f.mu.Lock()
	n := len(f.calls)
	f.calls = append(f.calls, madeCall{time.Now(), trace.SpanContextFromContext(ctx), c})
	f.inflight++
	f.peak = max(f.peak, f.inflight)
	answer, hold := f.answer, f.hold
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	if answer != nil {
		return answer(n, c)
	}
	return 200, 0, nil
}

// made returns a copy of the calls made so far.
func (f *fakeCaller) made() []madeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// peakInFlight returns the most calls ever in flight at once.
func (f *fakeCaller) peakInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// answerAll makes every call answer status.
func (f *fakeCaller) answerAll(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = func(int, HookCall) (int, time.Duration, error) { return status, 0, nil }
}

// fakeEvents records events.
type fakeEvents struct {
	mu     sync.Mutex
	events []Event
}

func (e *fakeEvents) Publish(ev events.Event) {
	se, ok := ev.Data.(Event)
	if !ok || se.Type != ev.Kind {
		panic("autoscale: event " + ev.Kind + " without its Event")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, se)
}

func (e *fakeEvents) types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []string
	for _, ev := range e.events {
		ts = append(ts, ev.Type)
	}
	return ts
}

func (e *fakeEvents) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// harness is a running Controller on fakes, inside a synctest bubble.
type harness struct {
	c      *Controller
	store  *fakeStore
	pool   *fakePool
	caller *fakeCaller
	events *fakeEvents
	start  time.Time
}

// option adjusts a harness before it starts.
type option func(*Config, *harness)

// withConfig adjusts the controller's Config.
func withConfig(f func(*Config)) option { return func(c *Config, _ *harness) { f(c) } }

// newHarness starts a controller on fresh fakes, with recs already in the
// store (as if declared before a restart). It must run inside
// synctest.Test; the controller is stopped, and Run's result checked, in
// the test's cleanup.
func newHarness(t *testing.T, recs []Record, opts ...option) *harness {
	t.Helper()
	h := &harness{
		store:  newFakeStore(),
		pool:   newFakePool(),
		caller: &fakeCaller{},
		events: &fakeEvents{},
		start:  time.Now(),
	}
	for _, r := range recs {
		h.store.put(r)
	}
	cfg := Config{Store: h.store, Pool: h.pool, Caller: h.caller, Events: h.events, MaxCallsPerMinute: 600_000}
	for _, o := range opts {
		o(&cfg, h)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	synctest.Wait()
	return h
}

// rec is a record for host in testOrg with the default rules, min 0 and
// max 10.
func rec(host string) Record {
	return Record{
		OrgID: testOrg, Hostname: host, Scaling: Declaration{URL: "https://hooks.example/" + host, Secret: "s3cret-" + host, Min: 0, Max: 10, ColdStart: DefaultColdStart, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: 60 * time.Second},
	}
}

// advance moves the bubble's fake clock forward by d and returns once
// every goroutine is idle again. Inside a synctest bubble time.Sleep does
// not wait on a real clock: it is how a test moves the fake one.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// at returns when call c was made, relative to the start of the test.
func (h *harness) at(c madeCall) time.Duration { return c.at.Sub(h.start) }

// callTimes returns when each call was made, relative to the start.
func (h *harness) callTimes() []time.Duration {
	var ts []time.Duration
	for _, c := range h.caller.made() {
		ts = append(ts, h.at(c))
	}
	return ts
}

// recIDForTest returns the ID of the record of host in testOrg, or "".
func (s *fakeStore) recIDForTest(host string) string {
	r, _ := s.get(host)
	return r.ID
}
