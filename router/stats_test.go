package router

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestStatsCapacityWithUnlimitedClient pins the capacity autoscaling reads
// from a pool that mixes a client announcing no max_concurrent with one
// that does: the unlimited client's in-flight requests must not be
// measured against the other client's limit (9 in flight next to an idle
// client of limit 10 is not 0.9 utilization), so capacity is undefined
// until the unlimited client announces a (learnt) limit.
func TestStatsCapacityWithUnlimitedClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		open := newGateConn("open", 1)
		openAnn := ann(svc("", "app.test"))
		openAnn.InstanceID = "open"
		rt.reg.update(open, openAnn)
		var reqs []*served
		for i := range 9 {
			reqs = append(reqs, serveAsync(rt, "app.test", fmt.Sprint("/", i)))
			recv(t, open.entered, "request on the unlimited client")
		}
		idle := newGateConn("idle", 2)
		idleAnn := limited(10, "app.test")
		idleAnn.InstanceID = "idle"
		rt.reg.update(idle, idleAnn)

		st := rt.reg.Stats("app.test", "")
		if st.Capacity != 0 || st.Inflight != 9 || st.Instances != 2 || st.Routable != 2 {
			t.Fatalf("Stats with an unlimited client = %+v, want capacity 0 (not measurable), inflight 9, 2 instances, 2 routable", st)
		}

		// The unlimited client learns a limit: its announcement now
		// carries it as max_concurrent, and it counts.
		learnt := ann(svc("", "app.test"))
		learnt.InstanceID = "open"
		learnt.Services[0].MaxConcurrent = 12
		learnt.Services[0].Concurrency = &tunnel.Concurrency{Mode: "aimd", Desired: 12, Min: 1, Max: 100}
		rt.reg.update(open, learnt)
		if st := rt.reg.Stats("app.test", ""); st.Capacity != 22 || st.Inflight != 9 {
			t.Fatalf("Stats once the learnt limit is announced = %+v, want capacity 22 (12 + 10), inflight 9", st)
		}

		// A standby client announcing no limit is not capacity, so it
		// leaves the primaries' figure alone.
		standby := newGateConn("standby", 3)
		sbAnn := ann(svc("", "app.test"))
		sbAnn.InstanceID = "standby"
		sbAnn.Services[0].Priority = 1
		rt.reg.update(standby, sbAnn)
		if st := rt.reg.Stats("app.test", ""); st.Capacity != 22 || st.Routable != 3 {
			t.Fatalf("Stats with an unlimited standby client = %+v, want capacity 22, 3 routable", st)
		}

		for range reqs {
			open.release <- struct{}{}
		}
		for _, r := range reqs {
			if rec := r.wait(t); rec.Code != 200 {
				t.Fatalf("request = %d, want 200", rec.Code)
			}
		}
	})
}

// TestQueuedOn counts the requests waiting in the pools of the hostnames
// the caller keeps, and none of the others'.
func TestQueuedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newRouter(t, Config{GatewayTimeout: time.Minute})
		a, b := newGateConn("a", 1), newGateConn("b", 2)
		rt.reg.update(a, limited(1, "a.test"))
		rt.reg.update(b, limited(1, "b.test"))
		var reqs []*served
		reqs = append(reqs, serveAsync(rt, "a.test", "/0"))
		recv(t, a.entered, "a's first request")
		reqs = append(reqs, serveAsync(rt, "b.test", "/0"))
		recv(t, b.entered, "b's first request")
		for i := 1; i <= 2; i++ {
			reqs = append(reqs, serveAsync(rt, "a.test", fmt.Sprint("/", i)))
		}
		reqs = append(reqs, serveAsync(rt, "b.test", "/1"))
		synctest.Wait()
		for _, tt := range []struct {
			name string
			keep func(string) bool
			want int
		}{
			{"all", func(string) bool { return true }, 3},
			{"a", func(h string) bool { return h == "a.test" }, 2},
			{"b", func(h string) bool { return h == "b.test" }, 1},
			{"none", func(string) bool { return false }, 0},
		} {
			if got := rt.reg.QueuedOn(tt.keep); got != tt.want {
				t.Errorf("QueuedOn(%s) = %d, want %d", tt.name, got, tt.want)
			}
		}
		for range 3 {
			a.release <- struct{}{}
		}
		for range 2 {
			b.release <- struct{}{}
		}
		for _, r := range reqs {
			if rec := r.wait(t); rec.Code != 200 {
				t.Errorf("request = %d, want 200", rec.Code)
			}
		}
	})
}
