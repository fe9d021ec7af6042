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
		rt.update(open, openAnn)
		var reqs []*served
		for i := range 9 {
			reqs = append(reqs, serveAsync(rt, "app.test", fmt.Sprint("/", i)))
			recv(t, open.entered, "request on the unlimited client")
		}
		idle := newGateConn("idle", 2)
		idleAnn := limited(10, "app.test")
		idleAnn.InstanceID = "idle"
		rt.update(idle, idleAnn)

		st := rt.Stats("app.test", "")
		if st.Capacity != 0 || st.Inflight != 9 || st.Instances != 2 || st.Routable != 2 {
			t.Fatalf("Stats with an unlimited client = %+v, want capacity 0 (not measurable), inflight 9, 2 instances, 2 routable", st)
		}

		// The unlimited client learns a limit: its announcement now
		// carries it as max_concurrent, and it counts.
		learnt := ann(svc("", "app.test"))
		learnt.InstanceID = "open"
		learnt.Services[0].MaxConcurrent = 12
		learnt.Services[0].Concurrency = &tunnel.Concurrency{Mode: "aimd", Desired: 12, Min: 1, Max: 100}
		rt.update(open, learnt)
		if st := rt.Stats("app.test", ""); st.Capacity != 22 || st.Inflight != 9 {
			t.Fatalf("Stats once the learnt limit is announced = %+v, want capacity 22 (12 + 10), inflight 9", st)
		}

		// A standby client announcing no limit is not capacity, so it
		// leaves the primaries' figure alone.
		standby := newGateConn("standby", 3)
		sbAnn := ann(svc("", "app.test"))
		sbAnn.InstanceID = "standby"
		sbAnn.Services[0].Priority = 1
		rt.update(standby, sbAnn)
		if st := rt.Stats("app.test", ""); st.Capacity != 22 || st.Routable != 3 {
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
