package router

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// statusConn is a client whose answers have a settable status and echo
// the request body it read after its id, or fail after reading it.
type statusConn struct {
	id      string
	at      time.Time
	status  atomic.Int64 // 0: 200
	fail    atomic.Bool  // vanish (tunnel.ErrSessionClosed) after reading the body
	served  atomic.Int64
	lastGot atomic.Pointer[string] // the last body read
}

func newStatusConn(id string, order int) *statusConn {
	return &statusConn{id: id, at: epoch.Add(time.Duration(order) * time.Second)}
}

func (c *statusConn) ID() string             { return c.id }
func (c *statusConn) ConnectedAt() time.Time { return c.at }
func (c *statusConn) RoundTrip(req *http.Request, _ string) (*http.Response, error) {
	var got []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		got = b
	}
	g := string(got)
	c.lastGot.Store(&g)
	if c.fail.Load() {
		return nil, fmt.Errorf("gone: %w", tunnel.ErrSessionClosed)
	}
	c.served.Add(1)
	status := int(c.status.Load())
	if status == 0 {
		status = http.StatusOK
	}
	body := c.id + ":" + g
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
	}, nil
}

// instAnn announces one service of app.example.com from instance inst.
func instAnn(inst string, s tunnel.Service) *tunnel.Announcement {
	s.Hostnames = []string{"app.example.com"}
	a := ann(s)
	a.InstanceID = inst
	return a
}

// visit sends one request and returns the answer.
func visit(t testing.TB, rt *Router, method, body, cookie string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, "http://app.example.com/", rd)
	if cookie != "" {
		r.Header.Set("Cookie", cookie)
	}
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, r)
	return w.Result()
}

// servedBy returns who answered resp (the id before the colon).
func servedBy(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := strings.Cut(string(b), ":")
	return id
}

// affinityOf returns the aperio_affinity Set-Cookie line of resp, "" if none.
func affinityOf(resp *http.Response) string {
	for _, l := range resp.Header.Values("Set-Cookie") {
		if strings.HasPrefix(l, AffinityCookie+"=") {
			return l
		}
	}
	return ""
}

// cookiePair is the Cookie header value that sends back a Set-Cookie line.
func cookiePair(line string) string {
	v, _, _ := strings.Cut(line, ";")
	return v
}

func TestWeightedSplit(t *testing.T) {
	rt := newRouter(t, Config{})
	a, b := newStatusConn("a", 1), newStatusConn("b", 2)
	rt.reg.update(a, instAnn("ia", tunnel.Service{Weight: 9}))
	rt.reg.update(b, instAnn("ib", tunnel.Service{Weight: 1}))
	seq := ""
	for range 100 {
		seq += servedBy(t, visit(t, rt, "GET", "", ""))
	}
	if na, nb := strings.Count(seq, "a"), strings.Count(seq, "b"); na != 90 || nb != 10 {
		t.Fatalf("split = a %d, b %d, want 90, 10", na, nb)
	}
	// Smooth: the canary's turns are spread, never two in a row.
	if strings.Contains(seq, "bb") {
		t.Errorf("sequence %s has the light client twice in a row", seq)
	}
}

func TestWeightClamped(t *testing.T) {
	rt := newRouter(t, Config{})
	tests := []struct {
		announced, want int
		notice          bool
	}{
		{0, 1, false},
		{1, 1, false},
		{1000, 1000, false},
		{5000, 1000, true},
		{-3, 1, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.announced), func(t *testing.T) {
			c := newStatusConn(fmt.Sprint("w", tt.announced), 1)
			notices := rt.reg.update(c, instAnn("i", tunnel.Service{Weight: tt.announced}))
			if got := rt.reg.Weight(c, "0"); got != tt.want {
				t.Errorf("Weight(%d) = %d, want %d", tt.announced, got, tt.want)
			}
			if got := strings.Contains(strings.Join(notices, "\n"), "weight"); got != tt.notice {
				t.Errorf("notice about weight for %d = %v (%q), want %v", tt.announced, got, notices, tt.notice)
			}
			rt.reg.detach(c)
		})
	}
}

func TestSticky(t *testing.T) {
	rt := newRouter(t, Config{Strategy: "sticky"})
	a, b := newStatusConn("a", 1), newStatusConn("b", 2)
	rt.reg.update(a, instAnn("ia", tunnel.Service{}))
	rt.reg.update(b, instAnn("ib", tunnel.Service{}))

	first := visit(t, rt, "GET", "", "")
	who := servedBy(t, first)
	line := affinityOf(first)
	for _, attr := range []string{"; Path=/", "; HttpOnly", "; SameSite=Lax"} {
		if !strings.Contains(line, attr) {
			t.Errorf("Set-Cookie %q lacks %q", line, attr)
		}
	}
	if strings.Contains(line, "Secure") {
		t.Errorf("Set-Cookie %q over http is Secure", line)
	}
	if strings.Contains(line, "ia") || strings.Contains(line, "ib") {
		t.Errorf("Set-Cookie %q reveals the instance id", line)
	}
	cookie := cookiePair(line)
	for i := range 10 {
		resp := visit(t, rt, "GET", "", "x=1; "+cookie+"; y=2")
		if got := servedBy(t, resp); got != who {
			t.Fatalf("visit %d with the cookie served by %s, want %s", i, got, who)
		}
		if l := affinityOf(resp); l != "" {
			t.Errorf("visit %d re-issued %q though the cookie was right", i, l)
		}
	}
	// A WebSocket upgrade with the cookie goes to the same instance.
	up := httptest.NewRequest("GET", "http://app.example.com/ws", nil)
	up.Header.Set("Cookie", cookie)
	up.Header.Set("Connection", "Upgrade")
	up.Header.Set("Upgrade", "websocket")
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, up)
	if got := servedBy(t, w.Result()); got != who {
		t.Errorf("upgrade with the cookie served by %s, want %s", got, who)
	}

	// Forged and oversized cookies are ignored: balanced, and a real one issued.
	for name, c := range map[string]string{
		"forged":    AffinityCookie + "=" + strings.Repeat("A", affinityLen),
		"oversized": AffinityCookie + "=" + strings.Repeat(cookie[len(AffinityCookie)+1:], 200),
	} {
		seen := map[string]bool{}
		for range 4 {
			resp := visit(t, rt, "GET", "", c)
			seen[servedBy(t, resp)] = true
			if affinityOf(resp) == "" {
				t.Errorf("%s cookie: no real cookie issued", name)
			}
		}
		if len(seen) != 2 {
			t.Errorf("%s cookie: served by %v, want both clients in turn", name, seen)
		}
	}

	// The instance goes: the base strategy serves, and the cookie is re-issued.
	gone, other := a, b
	if who == "b" {
		gone, other = b, a
	}
	rt.reg.detach(gone)
	resp := visit(t, rt, "GET", "", cookie)
	if got := servedBy(t, resp); got != other.id {
		t.Fatalf("after %s left, served by %s, want %s", gone.id, got, other.id)
	}
	nl := affinityOf(resp)
	if nl == "" || cookiePair(nl) == cookie {
		t.Fatalf("after %s left, Set-Cookie = %q, want a new affinity", gone.id, nl)
	}
	if got := servedBy(t, visit(t, rt, "GET", "", cookiePair(nl))); got != other.id {
		t.Errorf("with the re-issued cookie served by %s, want %s", got, other.id)
	}
}

func TestStickySecureOverHTTPS(t *testing.T) {
	rt := newRouter(t, Config{Strategy: "sticky"})
	rt.reg.update(newStatusConn("a", 1), instAnn("ia", tunnel.Service{}))
	r := httptest.NewRequest("GET", "https://app.example.com/", nil)
	r.TLS = &tls.ConnectionState{}
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, r)
	if l := affinityOf(w.Result()); !strings.HasSuffix(l, "; Secure") {
		t.Errorf("Set-Cookie over https = %q, want Secure", l)
	}
}

func TestStickyPerServiceOverride(t *testing.T) {
	rt := newRouter(t, Config{}) // the server round-robins
	a, b := newStatusConn("a", 1), newStatusConn("b", 2)
	rt.reg.update(a, instAnn("ia", tunnel.Service{LBStrategy: "sticky"}))
	rt.reg.update(b, instAnn("ib", tunnel.Service{LBStrategy: "sticky"}))
	first := visit(t, rt, "GET", "", "")
	who, cookie := servedBy(t, first), cookiePair(affinityOf(first))
	if cookie == "" {
		t.Fatal("a service announcing lb_strategy sticky got no affinity cookie")
	}
	for range 6 {
		if got := servedBy(t, visit(t, rt, "GET", "", cookie)); got != who {
			t.Fatalf("served by %s, want %s", got, who)
		}
	}
	c := newStatusConn("c", 3)
	notices := rt.reg.update(c, instAnn("ic", tunnel.Service{LBStrategy: "bogus"}))
	if !strings.Contains(strings.Join(notices, "\n"), "lb_strategy") {
		t.Errorf("notices for an unknown lb_strategy = %q, want one naming it", notices)
	}
}

// TestStickyConcurrent runs visitors in parallel, each keeping its cookie,
// while the pool balances new ones: every visitor stays on its instance.
func TestStickyConcurrent(t *testing.T) {
	rt := newRouter(t, Config{Strategy: "sticky"})
	for i, id := range []string{"a", "b", "c"} {
		rt.reg.update(newStatusConn(id, i), instAnn("i"+id, tunnel.Service{}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			first := visit(t, rt, "GET", "", "")
			who, cookie := servedBy(t, first), cookiePair(affinityOf(first))
			for i := range 25 {
				if got := servedBy(t, visit(t, rt, "GET", "", cookie)); got != who {
					errs <- fmt.Errorf("visit %d served by %s, want %s", i, got, who)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOutlierEjection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{OutlierConsecutive5xx: 3, OutlierEjectionTime: time.Minute, OutlierMaxEjectedPercent: 50})
		bad, good := newStatusConn("bad", 1), newStatusConn("good", 2)
		bad.status.Store(http.StatusInternalServerError)
		rt.reg.update(bad, instAnn("ibad", tunnel.Service{}))
		rt.reg.update(good, instAnn("igood", tunnel.Service{}))
		for range 6 { // round-robin: three answers of each
			visit(t, rt, "GET", "", "")
		}
		if n := rt.Counters().OutlierEjections; n != 1 {
			t.Fatalf("Counters().OutlierEjections = %d, want 1", n)
		}
		until := rt.reg.EjectedUntil(bad, "0")
		if want := time.Now().Add(time.Minute); !until.Equal(want) {
			t.Errorf("EjectedUntil = %v, want %v", until, want)
		}
		ex := rt.Explain(t.Context(), "app.example.com", "/", netip.Addr{})
		if !strings.Contains(fmt.Sprint(ex.Steps), "ejected as an outlier") {
			t.Errorf("Explain steps %v do not say bad is ejected", ex.Steps)
		}
		before := bad.served.Load()
		for range 10 {
			if got := servedBy(t, visit(t, rt, "GET", "", "")); got != "good" {
				t.Fatalf("while ejected, served by %s", got)
			}
		}
		if bad.served.Load() != before {
			t.Fatal("the ejected client was sent requests")
		}

		// Back after the time; still failing: ejected again for twice as long.
		time.Sleep(time.Minute)
		if !rt.reg.EjectedUntil(bad, "0").IsZero() {
			t.Fatal("still ejected after outlier_ejection_time")
		}
		for range 6 {
			visit(t, rt, "GET", "", "")
		}
		if got, want := rt.reg.EjectedUntil(bad, "0"), time.Now().Add(2*time.Minute); !got.Equal(want) {
			t.Errorf("second EjectedUntil = %v, want %v (doubled)", got, want)
		}
		// Capped at ten times.
		for range 6 {
			time.Sleep(time.Hour)
			for range 6 {
				visit(t, rt, "GET", "", "")
			}
		}
		if got, want := rt.reg.EjectedUntil(bad, "0"), time.Now().Add(10*time.Minute); !got.Equal(want) {
			t.Errorf("capped EjectedUntil = %v, want %v", got, want)
		}

		// Healed: one good answer after its return resets the doubling.
		time.Sleep(time.Hour)
		bad.status.Store(0)
		for range 4 {
			visit(t, rt, "GET", "", "")
		}
		bad.status.Store(http.StatusBadGateway)
		for range 6 {
			visit(t, rt, "GET", "", "")
		}
		if got, want := rt.reg.EjectedUntil(bad, "0"), time.Now().Add(time.Minute); !got.Equal(want) {
			t.Errorf("after healing, EjectedUntil = %v, want %v", got, want)
		}
	})
}

func TestOutlierMaxEjectedPercent(t *testing.T) {
	rt := newRouter(t, Config{OutlierConsecutive5xx: 2, OutlierEjectionTime: time.Hour, OutlierMaxEjectedPercent: 50})
	lone := newStatusConn("lone", 1)
	lone.status.Store(http.StatusServiceUnavailable)
	rt.reg.update(lone, instAnn("il", tunnel.Service{}))
	for range 5 {
		visit(t, rt, "GET", "", "")
	}
	if n := rt.Counters().OutlierEjections; n != 0 {
		t.Fatalf("a pool of one ejected its only client (%d ejections)", n)
	}
	if resp := visit(t, rt, "GET", "", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("lone client's answer = %d, want its own 503", resp.StatusCode)
	}
}

// TestOutlierEjectionConcurrent fails four clients at once under parallel
// visitors: no more than outlier_max_ejected_percent of them is ejected,
// and every ejection is counted once.
func TestOutlierEjectionConcurrent(t *testing.T) {
	rt := newRouter(t, Config{OutlierConsecutive5xx: 3, OutlierEjectionTime: time.Hour, OutlierMaxEjectedPercent: 50})
	var conns []*statusConn
	for i := range 4 {
		c := newStatusConn(fmt.Sprint("c", i), i)
		c.status.Store(http.StatusInternalServerError)
		rt.reg.update(c, instAnn(c.id, tunnel.Service{}))
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				visit(t, rt, "GET", "", "")
			}
		})
	}
	wg.Wait()
	ejected := 0
	for _, c := range conns {
		if !rt.reg.EjectedUntil(c, "0").IsZero() {
			ejected++
		}
	}
	if ejected != 2 {
		t.Errorf("%d of 4 clients ejected, want 2 (outlier_max_ejected_percent 50)", ejected)
	}
	if n := rt.Counters().OutlierEjections; n != 2 {
		t.Errorf("Counters().OutlierEjections = %d, want 2", n)
	}
}

func TestFailoverReplaysBody(t *testing.T) {
	cfg := Config{Failover: "retry", FailoverAllMethods: true, FailoverMaxJumps: 2, FailoverWindow: time.Minute, FailoverReplayMaxBody: 64}
	setup := func(t *testing.T, cfg Config) (*Router, *statusConn, *statusConn) {
		rt := newRouter(t, cfg)
		dead, live := newStatusConn("dead", 1), newStatusConn("live", 2)
		dead.fail.Store(true)
		rt.reg.update(dead, instAnn("id", tunnel.Service{}))
		rt.reg.update(live, instAnn("il", tunnel.Service{}))
		return rt, dead, live
	}
	t.Run("replayed", func(t *testing.T) {
		rt, dead, _ := setup(t, cfg)
		for range 2 { // one of the two goes to dead first
			resp := visit(t, rt, "POST", "hello body", "")
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "live:hello body" {
				t.Errorf("POST answer = %d %q, want 200 \"live:hello body\"", resp.StatusCode, b)
			}
		}
		if got := dead.lastGot.Load(); got == nil || *got != "hello body" {
			t.Fatalf("the dead client never read the body first")
		}
		if n := rt.replayKept.Load(); n != 0 {
			t.Errorf("bytes kept after the requests = %d, want 0", n)
		}
	})
	t.Run("too large streams", func(t *testing.T) {
		rt, _, _ := setup(t, cfg)
		codes := map[int]int{}
		for range 2 {
			codes[visit(t, rt, "POST", strings.Repeat("x", 65), "").StatusCode]++
		}
		if codes[http.StatusBadGateway] != 1 {
			t.Errorf("answers to a body above failover_replay_max_body = %v, want one 502", codes)
		}
	})
	t.Run("total bound", func(t *testing.T) {
		rt, _, _ := setup(t, cfg)
		rt.replayKept.Store(60) // other requests keep 60 of the 64 bytes
		codes := map[int]int{}
		for range 2 {
			codes[visit(t, rt, "POST", "hello body", "").StatusCode]++
		}
		if codes[http.StatusBadGateway] != 1 {
			t.Errorf("answers past the total bound = %v, want one 502", codes)
		}
	})
	t.Run("not all methods", func(t *testing.T) {
		c := cfg
		c.FailoverAllMethods = false
		rt, _, _ := setup(t, c)
		codes := map[int]int{}
		for range 2 {
			codes[visit(t, rt, "POST", "hello body", "").StatusCode]++
		}
		if codes[http.StatusBadGateway] != 1 {
			t.Errorf("POST answers without failover_all_methods = %v, want one 502", codes)
		}
		for range 2 {
			if resp := visit(t, rt, "PUT", "hello body", ""); resp.StatusCode != http.StatusOK {
				t.Errorf("PUT answer = %d, want 200 (idempotent, replayed)", resp.StatusCode)
			}
		}
	})
}

func TestRetryOn5xx(t *testing.T) {
	rt := newRouter(t, Config{RetryOn5xx: []int{503}, FailoverReplayMaxBody: 1024})
	flaky, fine := newStatusConn("flaky", 1), newStatusConn("fine", 2)
	flaky.status.Store(http.StatusServiceUnavailable)
	rt.reg.update(flaky, instAnn("if", tunnel.Service{}))
	rt.reg.update(fine, instAnn("ig", tunnel.Service{}))
	for range 4 {
		resp := visit(t, rt, "PUT", "data", "")
		if resp.StatusCode != http.StatusOK || servedBy(t, resp) != "fine" {
			t.Fatalf("PUT = %d, want 200 from fine after a retry", resp.StatusCode)
		}
	}
	codes := map[int]int{}
	for range 4 {
		codes[visit(t, rt, "POST", "data", "").StatusCode]++
	}
	if codes[http.StatusServiceUnavailable] != 2 {
		t.Errorf("POST answers = %v, want two 503s (never retried)", codes)
	}
	flaky.status.Store(http.StatusInternalServerError)
	codes = map[int]int{}
	for range 4 {
		codes[visit(t, rt, "GET", "", "").StatusCode]++
	}
	if codes[http.StatusInternalServerError] != 2 {
		t.Errorf("GET answers with 500 (not listed) = %v, want two 500s", codes)
	}
	// Once only: both answer 503, the visitor gets the second.
	flaky.status.Store(http.StatusServiceUnavailable)
	fine.status.Store(http.StatusServiceUnavailable)
	before := flaky.served.Load() + fine.served.Load()
	if resp := visit(t, rt, "GET", "", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET with both failing = %d, want 503", resp.StatusCode)
	}
	if n := flaky.served.Load() + fine.served.Load() - before; n != 2 {
		t.Errorf("GET with both failing was sent %d times, want 2", n)
	}
}

// TestTiersUnderEveryStrategy: only the lowest priority with a routable
// client serves, whatever the strategy; the next tier when it has none,
// and Explain names the tier.
func TestTiersUnderEveryStrategy(t *testing.T) {
	for _, st := range Strategies {
		for _, weighted := range []bool{false, true} {
			t.Run(fmt.Sprint(st, weighted), func(t *testing.T) {
				rt := newRouter(t, Config{Strategy: st})
				w := 0
				if weighted {
					w = 5
				}
				primary, standby, deeper := newStatusConn("primary", 3), newStatusConn("standby", 1), newStatusConn("deeper", 2)
				rt.reg.update(standby, instAnn("is", tunnel.Service{Priority: 1, Weight: w}))
				rt.reg.update(deeper, instAnn("id", tunnel.Service{Priority: 2}))
				rt.reg.update(primary, instAnn("ip", tunnel.Service{}))
				for range 6 {
					if got := servedBy(t, visit(t, rt, "GET", "", "")); got != "primary" {
						t.Fatalf("served by %s while the primary is routable", got)
					}
				}
				down := instAnn("ip", tunnel.Service{})
				down.Services[0].Healthy = false
				rt.reg.update(primary, down)
				for range 6 {
					if got := servedBy(t, visit(t, rt, "GET", "", "")); got != "standby" {
						t.Fatalf("served by %s with the primary down, want standby (priority 1)", got)
					}
				}
				ex := rt.Explain(t.Context(), "app.example.com", "/", netip.Addr{})
				if !strings.Contains(fmt.Sprint(ex.Steps), "serving tier: priority 1") {
					t.Errorf("Explain steps %v do not name tier 1", ex.Steps)
				}
			})
		}
	}
}
