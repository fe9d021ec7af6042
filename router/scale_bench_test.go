package router

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// hostsPerClient is how many hostnames one scale client announces: the
// protocol's bound on one announcement is 1,024 (tunnel.maxHostnames).
const hostsPerClient = 1000

// scaleHostnames returns the i-th registered pattern and a visitor
// hostname it serves: one in wildcardEvery is "*.tN.example.com",
// served as "www.tN.example.com"; the rest are exact.
func scaleHostnames(i int) (pattern, visit string) {
	if i%wildcardEvery == wildcardEvery-1 {
		return fmt.Sprintf("*.t%d.example.com", i), fmt.Sprintf("www.t%d.example.com", i)
	}
	return fmt.Sprintf("app%d.example.com", i), fmt.Sprintf("app%d.example.com", i)
}

// wildcardEvery makes 10% of the scale hostnames wildcards.
const wildcardEvery = 10

// scaleRouter registers n hostnames over n/hostsPerClient clients, each
// announcing one service with hostsPerClient of them, and returns the
// router, the visitor hostnames in a shuffled order (so lookups do not
// walk the maps in insertion order) and the heap bytes the route table
// and its pools hold per hostname.
func scaleRouter(b *testing.B, n int) (*Router, []string, float64) {
	b.Helper()
	visits := make([]string, n)
	anns := make([]*tunnel.Announcement, 0, n/hostsPerClient+1)
	for c := 0; c*hostsPerClient < n; c++ {
		hosts := make([]string, 0, hostsPerClient)
		for i := c * hostsPerClient; i < min(n, (c+1)*hostsPerClient); i++ {
			var pattern string
			pattern, visits[i] = scaleHostnames(i)
			hosts = append(hosts, pattern)
		}
		anns = append(anns, limited(100, hosts...))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rt := newRouter(b, Config{IPLimitMax: 1 << 30, IPLimitRefill: 1 << 30, MaxConcurrentRequests: 100})
	for c, a := range anns {
		rt.reg.update(&benchConn{fakeConn{id: fmt.Sprint("c", c), at: epoch}}, a)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// The announcements were built before the baseline and are kept by
	// the router, so the delta is the router's own: clients, services,
	// pools and the table.
	perHost := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	runtime.KeepAlive(anns)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(visits), func(i, j int) { visits[i], visits[j] = visits[j], visits[i] })
	return rt, visits, perHost
}

// BenchmarkLookupHostnames measures the route lookup with 1,000, 10,000
// and 100,000 registered hostnames (10% wildcards), so that its cost can
// be seen to stay flat: "match" is the table lookup alone (hostname and
// path to pool), "serve" a whole proxied request in the router with the
// tunnel faked (as BenchmarkServeHTTP). Each reports heapB/host, the heap
// the router holds per registered hostname. bench/scale-hostnames.sh
// prints them as a table.
//
// serve costs far more than BenchmarkServeHTTP's one-hostname service:
// a permit's release (service.release) locks every pool the service is
// in, here the 1,000 of its hostnames, so each request pays for them.
func BenchmarkLookupHostnames(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			rt, visits, perHost := scaleRouter(b, n)
			b.Run("match", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if rt.reg.table.Load().match(visits[i%len(visits)], "/index.html") == nil {
						b.Fatalf("no pool for %s", visits[i%len(visits)])
					}
				}
				b.ReportMetric(perHost, "heapB/host")
			})
			// The same lookups over 1,000 of the names: a working set that
			// fits the CPU caches, as skewed real traffic mostly does.
			// Beside "match" it separates the table's own cost (flat) from
			// the cache misses of touching 100,000 names at random.
			b.Run("match-hot", func(b *testing.B) {
				hot := visits[:min(len(visits), 1000)]
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if rt.reg.table.Load().match(hot[i%len(hot)], "/index.html") == nil {
						b.Fatalf("no pool for %s", hot[i%len(hot)])
					}
				}
			})
			b.Run("serve", func(b *testing.B) {
				reqs := make([]*http.Request, min(len(visits), 4096))
				for i := range reqs {
					reqs[i] = httptest.NewRequest(http.MethodGet, "http://"+visits[i]+"/index.html", nil)
				}
				w := &statusWriter{}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					req := reqs[i%len(reqs)]
					req.Header = http.Header{}
					w.h, w.code = http.Header{}, 0
					rt.ServeHTTP(w, req)
					if w.code != 0 && w.code != http.StatusOK {
						b.Fatalf("%s: status %d", req.Host, w.code)
					}
				}
				b.ReportMetric(perHost, "heapB/host")
			})
		})
	}
}

func TestScaleHostnamesServe(t *testing.T) {
	for i := range 2 * wildcardEvery {
		pattern, visit := scaleHostnames(i)
		rt := newRouter(t, Config{})
		rt.reg.update(newConn("c", 1), limited(1, pattern))
		if rt.reg.table.Load().match(visit, "/") == nil {
			t.Errorf("%s does not serve %s", pattern, visit)
		}
	}
}
