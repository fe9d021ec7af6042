package router

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// selectCases are the pools BenchmarkSelect and TestSelectAllocatesNothing
// pick from: four clients each, balanced as named; sticky reads the
// visitor's cookie first.
func selectCases(tb testing.TB) []struct {
	name string
	run  func()
} {
	build := func(strategy string, weights ...int) (*Router, *pool) {
		rt := newRouter(tb, Config{Strategy: strategy})
		for i, w := range weights {
			c := newStatusConn(fmt.Sprint("c", i), i)
			rt.reg.update(c, instAnn(fmt.Sprint("inst", i), tunnel.Service{Weight: w}))
		}
		return rt, rt.reg.table.Load().match("app.example.com", "/")
	}
	pick := func(rt *Router, p *pool, h http.Header) func() {
		return func() {
			w := waiter{}
			if h != nil {
				w.affinity = affinityFrom(h)
			}
			s, _ := p.tryAcquire(rt.strategy, &w)
			if s == nil {
				tb.Fatal("no pick")
			}
			s.release()
		}
	}
	rr, rrp := build("round-robin", 1, 1, 1, 1)
	wr, wrp := build("round-robin", 5, 1, 3, 1)
	st, stp := build("sticky", 1, 1, 1, 1)
	h := http.Header{"Cookie": {"theme=dark; " + AffinityCookie + "=" + affinityValue(st.reg.affinityKey, "inst2") + "; lang=en"}}
	return []struct {
		name string
		run  func()
	}{
		{"round-robin", pick(rr, rrp, nil)},
		{"weighted", pick(wr, wrp, nil)},
		{"sticky", pick(st, stp, h)},
	}
}

// BenchmarkSelect is the cost of choosing a client and returning its
// permit, by strategy.
func BenchmarkSelect(b *testing.B) {
	for _, c := range selectCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.run()
			}
		})
	}
}

func TestSelectAllocatesNothing(t *testing.T) {
	for _, c := range selectCases(t) {
		if n := testing.AllocsPerRun(1000, c.run); n != 0 {
			t.Errorf("%s selection allocates %v times, want 0", c.name, n)
		}
	}
}
