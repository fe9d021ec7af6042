package usage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// memStore is a fake store: increments under a lock, optionally failing.
type memStore struct {
	mu    sync.Mutex // guards the following fields
	rows  map[usage.Delta]int64
	bytes map[string]int64 // by token+day
	orgs  map[string]int64 // by org+month
	fail  bool
	calls int
}

func newMemStore() *memStore {
	return &memStore{bytes: map[string]int64{}, orgs: map[string]int64{}}
}

var errDown = errors.New("store down")

func (s *memStore) AddUsage(_ context.Context, ds []usage.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail {
		return errDown
	}
	for _, d := range ds {
		s.bytes[d.TokenID+d.Day.Format(time.DateOnly)] += d.Bytes
		mo := time.Date(d.Day.Year(), d.Day.Month(), 1, 0, 0, 0, 0, time.UTC)
		s.orgs[d.OrgID+mo.Format(time.DateOnly)] += d.Bytes
	}
	return nil
}

func (s *memStore) UsageTotals(_ context.Context, day, month time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return nil, nil, errDown
	}
	tt, ot := map[string]int64{}, map[string]int64{}
	for _, t := range tokens {
		tt[t] = s.bytes[t+day.Format(time.DateOnly)]
	}
	for _, o := range orgs {
		ot[o] = s.orgs[o+month.Format(time.DateOnly)]
	}
	return tt, ot, nil
}

func (s *memStore) token(id string, day time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes[id+day.Format(time.DateOnly)]
}

func (s *memStore) setFail(f bool) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

type limits struct{ tok, org map[string]int64 }

func (l limits) TokenDailyMax(id string) int64 { return l.tok[id] }
func (l limits) OrgMonthlyMax(id string) int64 { return l.org[id] }

var day1 = time.Date(2031, 3, 4, 23, 59, 0, 0, time.UTC)

func newMeter(t testing.TB, st usage.Store, lim usage.Limits, now *time.Time) *usage.Meter {
	t.Helper()
	m, err := usage.New(usage.Config{Store: st, Limits: lim, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFlushAddsUp(t *testing.T) {
	st := newMemStore()
	now := day1
	m := newMeter(t, st, nil, &now)
	c := m.Counter("tok_a", "org_a", "app.test")
	if c2 := m.Counter("tok_a", "org_a", "app.test"); c2 != c {
		t.Fatal("Counter() twice returned two counters, want one")
	}
	c.Record(100, 0)
	c.Record(50, 0)
	m.Counter("tok_a", "org_a", "api.test").Record(10, 0)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("tok_a", day1); got != 160 {
		t.Errorf("stored bytes of tok_a = %d, want 160", got)
	}
	// A second flush with nothing new adds nothing.
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("tok_a", day1); got != 160 {
		t.Errorf("stored bytes after an empty flush = %d, want 160", got)
	}
	if got := m.TokenUsed("tok_a"); got != 160 {
		t.Errorf("TokenUsed(tok_a) = %d, want 160", got)
	}
	// The next day starts from zero.
	now = day1.Add(2 * time.Minute)
	c.Record(7, 0)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("tok_a", now); got != 7 {
		t.Errorf("stored bytes of the next day = %d, want 7", got)
	}
	if got := m.TokenUsed("tok_a"); got != 7 {
		t.Errorf("TokenUsed(tok_a) on the next day = %d, want 7", got)
	}
}

// TestFailingStoreKeepsCounts: a flush into a store that is down fails,
// keeps every count, keeps enforcing with them, and the next flush once
// the store is back writes them all exactly once.
func TestFailingStoreKeepsCounts(t *testing.T) {
	st := newMemStore()
	now := day1.Add(-time.Hour)
	m := newMeter(t, st, limits{tok: map[string]int64{"tok_a": 1000}}, &now)
	c := m.Counter("tok_a", "org_a", "app.test")
	c.Record(1, 0)
	if err := m.Flush(t.Context()); err != nil { // learns the limit
		t.Fatal(err)
	}
	st.setFail(true)
	c.Record(600, 0)
	if err := m.Flush(t.Context()); !errors.Is(err, errDown) {
		t.Fatalf("Flush() with the store down = %v, want %v", err, errDown)
	}
	c.Record(400, 0)
	if err := m.Flush(t.Context()); !errors.Is(err, errDown) {
		t.Fatalf("second Flush() with the store down = %v, want %v", err, errDown)
	}
	if got := c.Check(); got != usage.TokenQuota {
		t.Errorf("Check() over the quota with the store down = %v, want TokenQuota", got)
	}
	st.setFail(false)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("tok_a", now); got != 1001 {
		t.Errorf("stored bytes after the store came back = %d, want 1001 (each count once)", got)
	}
	if got := c.Check(); got != usage.TokenQuota {
		t.Errorf("Check() after the flush = %v, want TokenQuota", got)
	}
	if ok, failed := m.Flushes(); ok != 2 || failed != 2 {
		t.Errorf("Flushes() = %d ok, %d failed, want 2, 2", ok, failed)
	}
}

func TestQuotas(t *testing.T) {
	st := newMemStore()
	now := day1.Add(-time.Hour)
	var exceeded []string
	m, err := usage.New(usage.Config{Store: st, Now: func() time.Time { return now },
		Limits:   limits{tok: map[string]int64{"tok_a": 100, "": 1}, org: map[string]int64{"org_b": 50}},
		Exceeded: func(_ context.Context, kind, id string) { exceeded = append(exceeded, kind+":"+id) }})
	if err != nil {
		t.Fatal(err)
	}
	a := m.Counter("tok_a", "org_a", "a.test")
	b := m.Counter("tok_b", "org_b", "b.test")
	master := m.Counter("", "org_a", "m.test")
	for _, c := range []*usage.Counter{a, b, master} {
		c.Record(1, 0)
	}
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.Record(98, 0)
	if got := a.Check(); got != usage.Allowed {
		t.Errorf("Check() at 99 of 100 = %v, want Allowed", got)
	}
	a.Record(1, 0) // counted locally, before any flush
	if got := a.Check(); got != usage.TokenQuota {
		t.Errorf("Check() at 100 of 100 = %v, want TokenQuota", got)
	}
	b.Record(60, 0)
	if got := b.Check(); got != usage.OrgQuota {
		t.Errorf("Check() of an org over its month = %v, want OrgQuota", got)
	}
	master.Record(1000, 0)
	if got := master.Check(); got != usage.Allowed {
		t.Errorf("Check() of the master token = %v, want Allowed (never limited)", got)
	}
	for range 3 {
		if err := m.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(exceeded) != 2 || exceeded[0] != "token:tok_a" || exceeded[1] != "org:org_b" {
		t.Errorf("Exceeded calls = %v, want [token:tok_a org:org_b] once each", exceeded)
	}
	// A new day resets the token's quota, not the org's month.
	now = day1.Add(time.Hour)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := a.Check(); got != usage.Allowed {
		t.Errorf("Check() on the next day = %v, want Allowed", got)
	}
	if got := b.Check(); got != usage.OrgQuota {
		t.Errorf("Check() of the org on the next day (same month) = %v, want OrgQuota", got)
	}
}

// TestTwoMetersShareAQuota: two servers on one store enforce one
// daily_max_bytes together; the overshoot stays within one flush's worth
// of traffic per server.
func TestTwoMetersShareAQuota(t *testing.T) {
	st := newMemStore()
	now := day1.Add(-time.Hour)
	const limit, per, perFlush = 10_000, 100, 10 // bytes; bytes per request; requests per server per flush
	lim := limits{tok: map[string]int64{"tok_a": limit}}
	ms := []*usage.Meter{newMeter(t, st, lim, &now), newMeter(t, st, lim, &now)}
	for _, m := range ms {
		m.Counter("tok_a", "org_a", "a.test")
		if err := m.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	refusedAll := false
	for round := 0; round < 100 && !refusedAll; round++ {
		refusedAll = true
		for _, m := range ms {
			c := m.Counter("tok_a", "org_a", "a.test")
			for range perFlush {
				if c.Check() == usage.Allowed {
					c.Record(per, 0)
					refusedAll = false
				}
			}
		}
		for _, m := range ms {
			if err := m.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := st.token("tok_a", now)
	bound := int64(len(ms) * perFlush * per) // one flush interval × rate × servers
	t.Logf("two meters: stored %d bytes for a limit of %d: overshoot %d, bound %d", got, limit, got-limit, bound)
	if got < limit || got-limit > bound {
		t.Errorf("stored %d bytes for a limit of %d, want at least the limit and at most %d over", got, limit, bound)
	}
}

func TestConfigInvalid(t *testing.T) {
	for _, cfg := range []usage.Config{{}, {Store: newMemStore(), FlushInterval: -time.Second}, {Store: newMemStore(), MaxCounters: -1}} {
		if _, err := usage.New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error, want one", cfg)
		}
	}
}

func TestMaxCounters(t *testing.T) {
	st := newMemStore()
	now := day1
	m, err := usage.New(usage.Config{Store: st, MaxCounters: 2, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	m.Counter("t", "o", "a").Record(1, 0)
	m.Counter("t", "o", "b").Record(1, 0)
	x, y := m.Counter("t", "o", "hostile-1"), m.Counter("t", "o", "hostile-2")
	if x != y {
		t.Error("counters beyond MaxCounters are distinct, want them collapsed into one")
	}
	x.Record(1, 0)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("t", now); got != 3 {
		t.Errorf("stored bytes = %d, want 3 (nothing lost beyond the cap)", got)
	}
}

// TestRunFlushesAtShutdown: Run's last flush writes what was counted.
func TestRunFlushesAtShutdown(t *testing.T) {
	st := newMemStore()
	m, err := usage.New(usage.Config{Store: st, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.Counter("t", "o", "a").Record(42, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if got := st.token("t", time.Now()); got != 42 {
		t.Errorf("stored bytes after Run stopped = %d, want 42", got)
	}
}

func TestRecordAllocatesNothing(t *testing.T) {
	m := newMeter(t, newMemStore(), nil, new(time.Time))
	m.Counter("tok_a", "org_a", "app.test")
	if n := testing.AllocsPerRun(1000, func() {
		c := m.Counter("tok_a", "org_a", "app.test")
		if c.Check() == usage.Allowed {
			c.Record(512, 0)
		}
	}); n != 0 {
		t.Errorf("Counter+Check+Record allocates %v times, want 0", n)
	}
}

// BenchmarkUsageRecord is the request path's cost: one lookup, the quota
// check and the record.
func BenchmarkUsageRecord(b *testing.B) {
	m := newMeter(b, newMemStore(), nil, new(time.Time))
	m.Counter("tok_0123456789abcdef", "org_0123456789abcdef", "app.example.com")
	b.ReportAllocs()
	for b.Loop() {
		c := m.Counter("tok_0123456789abcdef", "org_0123456789abcdef", "app.example.com")
		if c.Check() == usage.Allowed {
			c.Record(512, 0)
		}
	}
}

// TestMasterNeverLimitedByItsOrg: the master token's traffic counts
// towards its organization's month but is never refused by it, while a
// token of the same organization is.
func TestMasterNeverLimitedByItsOrg(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	m := newMeter(t, newMemStore(), limits{org: map[string]int64{"org_d": 100}}, &now)
	master := m.Counter("", "org_d", "m.test")
	tok := m.Counter("tok_d", "org_d", "d.test")
	master.Record(60, 60)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := master.Check(); got != usage.Allowed {
		t.Errorf("master Check() with its org over its month = %v, want Allowed", got)
	}
	if got := tok.Check(); got != usage.OrgQuota {
		t.Errorf("token Check() with its org over its month (master's bytes) = %v, want OrgQuota", got)
	}
}

// TestTokenBytes: the per-token figures are in and out apart, and keep
// growing across flushes (a metric's counter never goes down).
func TestTokenBytes(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	m := newMeter(t, newMemStore(), nil, &now)
	m.Counter("tok_a", "org_a", "a.test").Record(10, 100)
	m.Counter("tok_a", "org_a", "b.test").Record(1, 2)
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.Counter("tok_b", "org_a", "a.test").Record(5, 0)
	got := map[string][2]int64{}
	m.TokenBytes(func(id string, in, out int64) { got[id] = [2]int64{in, out} })
	want := map[string][2]int64{"tok_a": {11, 102}, "tok_b": {5, 0}}
	if len(got) != len(want) || got["tok_a"] != want["tok_a"] || got["tok_b"] != want["tok_b"] {
		t.Errorf("TokenBytes = %v, want %v", got, want)
	}
}

// BenchmarkCounterCheckRecord is what a request pays once the router has
// its service's counter (cached on the service): the quota check before
// the request and the count after it.
func BenchmarkCounterCheckRecord(b *testing.B) {
	m := newMeter(b, newMemStore(), nil, new(time.Time))
	c := m.Counter("tok_0123456789abcdef", "org_0123456789abcdef", "app.example.com")
	b.ReportAllocs()
	for b.Loop() {
		if c.Check() == usage.Allowed {
			c.Record(512, 0)
		}
	}
}

// TestNewCounterWhileChecking: a token's new counter (a new hostname or
// port of the same token) is created while its other counters are checked
// on request paths; the account they share is not written (go test -race
// caught a rewrite of its master flag here).
func TestNewCounterWhileChecking(t *testing.T) {
	now := day1
	m := newMeter(t, newMemStore(), limits{tok: map[string]int64{"tok_r": 1 << 40}}, &now)
	hot, master := m.Counter("tok_r", "org_r", "a.test"), m.Counter("", "org_r", "m.test")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			m.Counter("tok_r", "org_r", fmt.Sprintf("h%d.test", i))
			m.Counter("", "org_r", fmt.Sprintf("m%d.test", i))
		}
	}()
	for {
		select {
		case <-done:
			if m.Counter("", "org_r", "m199.test").Check() != usage.Allowed || hot.Check() != usage.Allowed {
				t.Error("a counter is refused under a limit it is far from")
			}
			return
		default:
			if hot.Check() != usage.Allowed || master.Check() != usage.Allowed {
				t.Fatal("Check refused while new counters were created")
			}
		}
	}
}

// TestChargeAsBytesFlow: Charge counts bytes at once without a request
// and says when a quota is reached; TryCharge refuses, counting nothing,
// once it is; Record afterwards counts the request and only the bytes
// not charged; Cut counts per quota; Limited says which counters a
// quota can refuse. None allocates (#38 item 13).
func TestChargeAsBytesFlow(t *testing.T) {
	st := newMemStore()
	now := day1
	m := newMeter(t, st, limits{tok: map[string]int64{"tok_a": 1000}, org: map[string]int64{"org_b": 500}}, &now)
	a := m.Counter("tok_a", "org_a", "app.test")
	b := m.Counter("tok_b", "org_b", "b.test")
	free := m.Counter("tok_c", "org_c", "c.test")
	master := m.Counter("", "org_b", "m.test")
	if !a.Limited() || !b.Limited() || free.Limited() || master.Limited() {
		t.Errorf("Limited() = %v %v %v %v, want true true false false", a.Limited(), b.Limited(), free.Limited(), master.Limited())
	}
	if v := a.Charge(600, 0); v != usage.Allowed {
		t.Fatalf("Charge(600) under a 1000 quota = %v, want Allowed", v)
	}
	if v := a.Charge(0, 400); v != usage.TokenQuota {
		t.Fatalf("Charge reaching the 1000 quota = %v, want TokenQuota", v)
	}
	if a.TryCharge(10, 0) {
		t.Error("TryCharge over the quota = true, want false")
	}
	if !b.TryCharge(500, 0) || b.TryCharge(1, 0) || b.Charge(0, 0) != usage.OrgQuota {
		t.Error("TryCharge against org_b's 500: want the first 500 bytes taken, then refused as OrgQuota")
	}
	a.Record(0, 0)
	a.Cut(usage.TokenQuota)
	b.Cut(usage.OrgQuota)
	b.Cut(usage.Allowed) // not a cut
	if tok, org := m.QuotaCuts(); tok != 1 || org != 1 {
		t.Errorf("QuotaCuts() = %d, %d, want 1, 1", tok, org)
	}
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.token("tok_a", day1); got != 1000 {
		t.Errorf("stored bytes of tok_a = %d, want 1000 (charged, not counted again by Record)", got)
	}
	if n := testing.AllocsPerRun(1000, func() {
		free.Charge(100, 100)
		free.TryCharge(1, 1)
		free.Limited()
	}); n != 0 {
		t.Errorf("Charge, TryCharge and Limited allocate %v times, want 0", n)
	}
	var none *usage.Counter
	if none.Charge(1, 1) != usage.Allowed || !none.TryCharge(1, 1) || none.Limited() {
		t.Error("a nil Counter must charge nothing and allow")
	}
	none.Cut(usage.TokenQuota)
}
