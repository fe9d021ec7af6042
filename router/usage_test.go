package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// usageStore is a fake usage store: it keeps the sum of every flush.
type usageStore struct {
	mu       sync.Mutex // guards the following fields
	bytes    map[string]int64
	requests map[string]int64 // nil until a flush
}

func (s *usageStore) AddUsage(_ context.Context, ds []usage.Delta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.requests == nil {
		s.requests = map[string]int64{}
	}
	for _, d := range ds {
		s.bytes[d.TokenID+"|"+d.Hostname] += d.Bytes
		s.requests[d.TokenID+"|"+d.Hostname] += d.Requests
	}
	return nil
}

func (s *usageStore) UsageTotals(_ context.Context, _, _ time.Time, tokens, _ []string) (map[string]int64, map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tt := map[string]int64{}
	for k, v := range s.bytes {
		tt[strings.Split(k, "|")[0]] += v
	}
	return tt, map[string]int64{}, nil
}

type dailyMax int64

func (d dailyMax) TokenDailyMax(string) int64 { return int64(d) }
func (dailyMax) OrgMonthlyMax(string) int64   { return 0 }

// TestTokenQuota: the visitor bytes through a token's client count
// against it per bind hostname, and once the token's daily_max_bytes is
// used up its requests get 429 token-quota without Retry-After, the one
// whose body crosses it too; master token traffic is never refused.
func TestTokenQuota(t *testing.T) {
	st := &usageStore{bytes: map[string]int64{}}
	m, err := usage.New(usage.Config{Store: st, Limits: dailyMax(1000)})
	if err != nil {
		t.Fatal(err)
	}
	rt := newRouter(t, Config{Usage: m})
	c := &readingConn{fakeConn: newConn("a", 1), bodies: make(chan string, 10)}
	rt.reg.updateAs(c, ann(svc("", "app.test")), rights{allowed: []string{"app.test"}, org: "org_a", tokenID: "tok_a"})
	if err := m.Flush(t.Context()); err != nil { // learns the limit
		t.Fatal(err)
	}
	post := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://app.test/up", strings.NewReader(strings.Repeat("x", 600))))
		return rec
	}
	if rec := post(); rec.Code != 200 { // 600 bytes in, 3 ("a/0") out
		t.Fatalf("request under the quota = %d, want 200", rec.Code)
	}
	// The second starts under the quota and crosses it with its body; the
	// third starts over it.
	for _, when := range []string{"crossing it", "over it"} {
		rec := post()
		if rec.Code != 429 || rec.Header().Get("X-Aperio-Limit") != "token-quota; setting=token.daily_max_bytes" {
			t.Fatalf("request %s = %d %q, want 429 token-quota; setting=token.daily_max_bytes", when, rec.Code, rec.Header().Get("X-Aperio-Limit"))
		}
		if got := rec.Header().Get("Retry-After"); got != "" {
			t.Errorf("token-quota 429 has Retry-After %q, want none", got)
		}
	}
	if got := rt.Counters().rateLimitedForTest("token-quota"); got != 2 {
		t.Errorf("Counters() 429s of token-quota = %d, want 2", got)
	}
	if tok, _ := m.QuotaCuts(); tok != 1 {
		t.Errorf("QuotaCuts() token = %d, want 1 (the body that crossed it)", tok)
	}
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The crossing body is charged up to the read that crossed the quota;
	// the refused request is not counted.
	if got := st.bytes["tok_a|app.test"]; got <= 1000 || got > 1203 {
		t.Errorf("flushed bytes of tok_a on app.test = %d, want over 1000 and at most 1203", got)
	}
	// The master token's clients are counted, never refused.
	mc := &readingConn{fakeConn: newConn("m", 2), bodies: make(chan string, 10)}
	rt.reg.update(mc, ann(svc("", "master.test")))
	for range 3 {
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://master.test/", strings.NewReader(strings.Repeat("x", 600))))
		if rec.Code != 200 {
			t.Fatalf("master-token request = %d, want 200", rec.Code)
		}
	}
}

// usageBenchRouter is benchRouter with the client on token tok_a of
// org_a, and m (nil: none) counting its requests.
func usageBenchRouter(tb testing.TB, m *usage.Meter) *Router {
	rt := newRouter(tb, Config{IPLimitMax: 1 << 30, IPLimitRefill: 1 << 30, MaxConcurrentRequests: 100, Usage: m})
	rt.reg.updateAs(&benchConn{fakeConn{id: "c1", at: epoch}}, limited(100, "app.example.com"),
		rights{allowed: []string{"app.example.com"}, org: "org_a", tokenID: "tok_a"})
	return rt
}

func newUsageMeter(tb testing.TB, limit int64) (*usage.Meter, *usageStore) {
	st := &usageStore{bytes: map[string]int64{}}
	m, err := usage.New(usage.Config{Store: st, Limits: dailyMax(limit)})
	if err != nil {
		tb.Fatal(err)
	}
	return m, st
}

// TestUsageAllocatesNothingMore: the request path with a meter (a token
// with a quota, checked and recorded per request) allocates what it does
// without one, and every request is counted.
func TestUsageAllocatesNothingMore(t *testing.T) {
	measure := func(rt *Router) float64 {
		req := httptest.NewRequest(http.MethodGet, "http://app.example.com/index.html", nil)
		w := &discardWriter{}
		return testing.AllocsPerRun(200, func() {
			req.Header = http.Header{}
			w.h = http.Header{}
			rt.ServeHTTP(w, req)
		})
	}
	base := measure(usageBenchRouter(t, nil))
	m, st := newUsageMeter(t, 1<<40)
	if got := measure(usageBenchRouter(t, m)); got > base {
		t.Errorf("allocations per request with usage on = %v, want at most %v as without", got, base)
	}
	if err := m.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// AllocsPerRun runs the function once more to warm up.
	if got := st.requests["tok_a|app.example.com"]; got != 201 {
		t.Errorf("flushed requests of tok_a = %d, want 201", got)
	}
}

// BenchmarkServeHTTPUsage is BenchmarkServeHTTP with the client on a
// token with a daily quota: the counter lookup, the check and the record
// on every request. Compare with BenchmarkServeHTTPNoUsage, the same
// router without a meter.
func BenchmarkServeHTTPUsage(b *testing.B) {
	m, _ := newUsageMeter(b, 1<<50)
	benchRequests(b, usageBenchRouter(b, m))
}

// BenchmarkServeHTTPNoUsage is BenchmarkServeHTTPUsage's baseline.
func BenchmarkServeHTTPNoUsage(b *testing.B) {
	benchRequests(b, usageBenchRouter(b, nil))
}
