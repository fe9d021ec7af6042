package telemetry

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// statsAt returns a Stats on a fake clock at a bucket boundary.
func statsAt(t testing.TB, limit int) (*Stats, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)}
	return NewStats(StatsConfig{Now: clk.Now, HostLimit: limit}), clk
}

// ended returns a routed request on host that ends now with status and
// duration d.
func ended(now time.Time, host string, status int, d time.Duration) *Request {
	return &Request{Start: now.Add(-d), Duration: d, Hostname: host, Routed: true, Status: status}
}

func hostOf(t testing.TB, r StatsReading, host string) apitype.HostStats {
	t.Helper()
	for _, h := range r.Hosts {
		if h.Hostname == host {
			return h
		}
	}
	t.Fatalf("Read() has no host %q: %+v", host, r.Hosts)
	return apitype.HostStats{}
}

func TestStatsWindows(t *testing.T) {
	s, clk := statsAt(t, 0)
	const host = "app.example.com"
	// Ten minutes ago: only the 1h window still holds these.
	for range 4 {
		s.Record(ended(clk.Now(), host, 200, 5*time.Millisecond))
	}
	clk.Advance(10 * time.Minute)
	// Three minutes ago: 5m and 1h.
	s.Record(ended(clk.Now(), host, 503, 5*time.Millisecond))
	s.Record(&Request{Start: clk.Now(), Hostname: host, Routed: true, Status: 0}) // aborted
	clk.Advance(3 * time.Minute)
	// Now: every window.
	s.Record(ended(clk.Now(), host, 404, 5*time.Millisecond))
	s.Record(ended(clk.Now(), host, 302, 5*time.Millisecond))
	held := ended(clk.Now(), host, 200, 5*time.Millisecond)
	held.QueueWait = 3 * time.Millisecond
	s.Record(held)

	r := s.Read(nil)
	if !r.At.Equal(clk.Now()) {
		t.Errorf("Read().At = %v, want the clock's %v", r.At, clk.Now())
	}
	h := hostOf(t, r, host)
	tests := []struct {
		window                       string
		requests, errors, s2, s3, s4 int64
		s5, aborted, held            int64
		seconds                      float64
	}{
		{apitype.Window1m, 3, 0, 1, 1, 1, 0, 0, 1, 60},
		{apitype.Window5m, 5, 2, 1, 1, 1, 1, 1, 1, 300},
		{apitype.Window1h, 9, 2, 5, 1, 1, 1, 1, 1, 3600},
	}
	for _, tt := range tests {
		w := h.Windows[tt.window]
		got := []int64{w.Requests, w.Errors, w.Status2xx, w.Status3xx, w.Status4xx, w.Status5xx, w.Aborted, w.Held}
		want := []int64{tt.requests, tt.errors, tt.s2, tt.s3, tt.s4, tt.s5, tt.aborted, tt.held}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("window %s = requests, errors, 2xx, 3xx, 4xx, 5xx, aborted, held %v, want %v", tt.window, got, want)
		}
		if want := float64(tt.requests) / tt.seconds; w.RPS != want {
			t.Errorf("window %s rps = %v, want %v", tt.window, w.RPS, want)
		}
		if want := float64(tt.errors) / float64(tt.requests); w.ErrorRate != want {
			t.Errorf("window %s error_rate = %v, want %v", tt.window, w.ErrorRate, want)
		}
	}
	if len(h.Series) != 60 {
		t.Fatalf("series has %d buckets, want 60", len(h.Series))
	}
	last := h.Series[59]
	if last.At != clk.Now().Unix() || last.Requests != 3 || last.Status2xx != 1 || last.Status3xx != 1 || last.Status4xx != 1 {
		t.Errorf("series' last bucket = %+v, want at %d with 3 requests (one 2xx, 3xx, 4xx)", last, clk.Now().Unix())
	}
	if first := h.Series[0]; first.At != clk.Now().Unix()-590 {
		t.Errorf("series' first bucket at %d, want %d", first.At, clk.Now().Unix()-590)
	}
	// An hour and more later nothing is left, and the hostname drops out.
	clk.Advance(61 * time.Minute)
	if r := s.Read(nil); len(r.Hosts) != 0 {
		t.Errorf("Read() an hour later = %+v, want no host", r.Hosts)
	}
}

func TestStatsQuantiles(t *testing.T) {
	s, clk := statsAt(t, 0)
	// 1..1000 ms, one request each: p50 ≈ 500, p90 ≈ 900, p99 ≈ 990,
	// each within its half-octave bucket's width (~41%).
	for i := 1; i <= 1000; i++ {
		s.Record(ended(clk.Now(), "q.example.com", 200, time.Duration(i)*time.Millisecond))
	}
	w := hostOf(t, s.Read(nil), "q.example.com").Windows[apitype.Window1m]
	for _, tt := range []struct {
		name      string
		got, want float64
	}{{"p50", w.P50MS, 500}, {"p90", w.P90MS, 900}, {"p99", w.P99MS, 990}} {
		if math.Abs(tt.got-tt.want)/tt.want > 0.2 {
			t.Errorf("%s = %.1f ms, want %.0f within 20%%", tt.name, tt.got, tt.want)
		}
	}
	if !(w.P50MS <= w.P90MS && w.P90MS <= w.P99MS) {
		t.Errorf("quantiles p50 %.1f, p90 %.1f, p99 %.1f: want non-decreasing", w.P50MS, w.P90MS, w.P99MS)
	}
	if w.QueueWaitP99MS != 0 {
		t.Errorf("queue_wait_p99_ms = %v with no request queued, want 0", w.QueueWaitP99MS)
	}
}

func TestHistIndex(t *testing.T) {
	for _, tt := range []struct {
		ms   float64
		want int
	}{{-1, 0}, {0, 0}, {0.5, 1}, {1, 1}, {1.2, 2}, {math.Sqrt2, 2}, {2, 3}, {3, 5}, {1e9, statsHistBuckets - 1}, {math.Inf(1), statsHistBuckets - 1}} {
		if got := histIndex(tt.ms); got != tt.want {
			t.Errorf("histIndex(%v) = %d, want %d", tt.ms, got, tt.want)
		}
	}
	for i := 1; i < len(histUpper); i++ {
		if got := histIndex(histUpper[i]); got != i {
			t.Errorf("histIndex(bound %v) = %d, want %d", histUpper[i], got, i)
		}
	}
}

func TestStatsHostBound(t *testing.T) {
	s, clk := statsAt(t, 2)
	for _, h := range []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com"} {
		s.Record(ended(clk.Now(), h, 200, time.Millisecond))
	}
	s.Record(&Request{Start: clk.Now(), Hostname: "evil.example.com", Status: 404}) // unrouted
	s.Scaling("a.example.com", clk.Now())
	s.Scaling("a.example.com", clk.Now().Add(-2*time.Hour)) // too old to count
	r := s.Read(nil)
	var names []string
	for _, h := range r.Hosts {
		names = append(names, h.Hostname)
	}
	if want := "[__other __unrouted a.example.com b.example.com]"; fmt.Sprint(names) != want {
		t.Errorf("Read() hosts = %v, want %s", names, want)
	}
	if got := hostOf(t, r, HostLabelOther).Windows[apitype.Window1m].Requests; got != 2 {
		t.Errorf("__other requests = %d, want 2", got)
	}
	if r.ScalingEvents1h != 1 {
		t.Errorf("ScalingEvents1h = %d, want 1", r.ScalingEvents1h)
	}
	kept := s.Read(func(h string) bool { return h == "b.example.com" })
	if len(kept.Hosts) != 1 || kept.Hosts[0].Hostname != "b.example.com" || kept.ScalingEvents1h != 0 {
		t.Errorf("Read(keep b) = %+v, want b.example.com alone and no scaling event", kept)
	}
}

func TestStatsRecordAllocs(t *testing.T) {
	s, clk := statsAt(t, 0)
	rec := ended(clk.Now(), "alloc.example.com", 200, 3*time.Millisecond)
	s.Record(rec) // the hostname's first request allocates its rings
	if n := testing.AllocsPerRun(1000, func() { s.Record(rec) }); n != 0 {
		t.Errorf("Stats.Record allocates %v times per request, want 0", n)
	}
}

func BenchmarkStatsRecord(b *testing.B) {
	s, clk := statsAt(b, 0)
	rec := ended(clk.Now(), "bench.example.com", 200, 3*time.Millisecond)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Record(rec)
		}
	})
}

// TestStatsSeriesFromStart: in the server's first ten minutes the series
// begin at its start, not ten minutes back before it existed; later they
// hold the last ten minutes.
func TestStatsSeriesFromStart(t *testing.T) {
	s, clk := statsAt(t, 0)
	start := clk.Now().Unix()
	const host = "app.example.com"
	clk.Advance(95 * time.Second)
	s.Record(ended(clk.Now(), host, 200, time.Millisecond))
	h := hostOf(t, s.Read(nil), host)
	if len(h.Series) != 10 || h.Series[0].At != start || h.Series[9].At != clk.Now().Unix()/10*10 {
		t.Fatalf("series after 95 s = %d buckets from %d to %d, want 10 from the start %d", len(h.Series), h.Series[0].At, h.Series[len(h.Series)-1].At, start)
	}
	if h.Series[9].Requests != 1 {
		t.Errorf("the last bucket = %+v, want the request", h.Series[9])
	}
	clk.Advance(20 * time.Minute)
	s.Record(ended(clk.Now(), host, 200, time.Millisecond))
	if h, want := hostOf(t, s.Read(nil), host), clk.Now().Unix()/10*10-590; len(h.Series) != 60 || h.Series[0].At != want {
		t.Errorf("series 21 min after the start = %d buckets from %d, want 60 from %d", len(h.Series), h.Series[0].At, want)
	}
}

// TestStatsUnroutedNoErrors: the requests no bind matched keep their
// status classes (they were answered 502) but count no errors: a
// hostname nobody binds is a visitor's miss, not a service failing.
func TestStatsUnroutedNoErrors(t *testing.T) {
	s, clk := statsAt(t, 0)
	for range 3 {
		s.Record(&Request{Start: clk.Now(), Hostname: "nobody.example", Routed: false, Status: 502})
	}
	s.Record(ended(clk.Now(), "app.example.com", 502, time.Millisecond))
	r := s.Read(nil)
	u := hostOf(t, r, HostLabelUnrouted)
	for _, win := range []string{apitype.Window1m, apitype.Window5m, apitype.Window1h} {
		w := u.Windows[win]
		if w.Requests != 3 || w.Status5xx != 3 || w.Errors != 0 || w.ErrorRate != 0 {
			t.Errorf("unrouted window %s = requests %d, 5xx %d, errors %d, rate %v; want 3, 3, 0, 0", win, w.Requests, w.Status5xx, w.Errors, w.ErrorRate)
		}
	}
	if w := hostOf(t, r, "app.example.com").Windows[apitype.Window1m]; w.Errors != 1 || w.ErrorRate != 1 {
		t.Errorf("a bound hostname's 502 = errors %d, rate %v; want 1, 1", w.Errors, w.ErrorRate)
	}
}
