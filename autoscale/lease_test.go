package autoscale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/store"
)

// node is one server of a cluster sharing a fakeStore: its controller and
// the caller its calls go through.
type node struct {
	c      *Controller
	caller *fakeCaller
	// kill stops the controller as a crash would for the calls it has in
	// flight: their outcome is never recorded. It waits for Run to return.
	kill func()
}

// newCluster starts n controllers on st (each with its own change feed,
// caller and lease holder name) and pool, inside a synctest bubble. They
// are stopped in the test's cleanup.
func newCluster(t *testing.T, st *fakeStore, pool *fakePool, n int) []*node {
	t.Helper()
	nodes := make([]*node, n)
	for i := range n {
		caller := &fakeCaller{}
		c, err := New(Config{Store: clusterNode{st}, Pool: pool, Caller: caller, MaxCallsPerMinute: 600_000,
			Holder: fmt.Sprintf("srv_%d", i)})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		nodes[i] = &node{c: c, caller: caller, kill: runNode(t, c)}
	}
	synctest.Wait()
	return nodes
}

// runNode runs c until the returned kill (also the test's cleanup) stops
// it, as a crash would for its calls in flight, and checks Run's result.
func runNode(t *testing.T, c *Controller) (kill func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	kill = sync.OnceFunc(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	t.Cleanup(kill)
	return kill
}

// allCalls returns every call the nodes made, oldest first.
func allCalls(nodes []*node) []madeCall {
	var all []madeCall
	for _, n := range nodes {
		all = append(all, n.caller.made()...)
	}
	// In the order they were made, whichever server made them.
	slices.SortStableFunc(all, func(a, b madeCall) int { return a.at.Compare(b.at) })
	return all
}

// TestOneCallAcrossServers: a burst split over two, then three, servers
// sharing one store makes exactly one call, and every server's requests
// wait for that call's instance as if they had made it: their flights
// succeed when it is accepted, and no server calls again inside the
// cooldown.
func TestOneCallAcrossServers(t *testing.T) {
	for _, servers := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d servers", servers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newFakeStore()
				st.put(rec("app.example.com"))
				nodes := newCluster(t, st, newFakePool(), servers)
				hold := make(chan struct{})
				for _, n := range nodes {
					n.caller.hold = hold
				}
				const burst = 300
				starts := make([]*Start, burst)
				errs := make([]error, burst)
				var wg sync.WaitGroup
				for i := range burst {
					wg.Go(func() {
						starts[i], errs[i] = nodes[i%servers].c.ColdStart(context.Background(), testOrg, "app.example.com", "")
					})
				}
				wg.Wait()
				synctest.Wait()
				for i, err := range errs {
					if err != nil {
						t.Fatalf("ColdStart #%d (server %d) = %v", i, i%servers, err)
					}
				}
				if calls := allCalls(nodes); len(calls) != 1 {
					t.Fatalf("calls while the first is in flight = %d, want 1", len(calls))
				}
				close(hold)
				synctest.Wait()
				for i, s := range starts {
					select {
					case <-s.Done():
					default:
						t.Fatalf("flight of request #%d (server %d) not done after the call was accepted", i, i%servers)
					}
					if err := s.Err(); err != nil {
						t.Fatalf("flight of request #%d (server %d) = %v, want success", i, i%servers, err)
					}
				}
				// Inside the cooldown every server joins; none calls.
				advance(50 * time.Second)
				for _, n := range nodes {
					if _, err := n.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				if calls := allCalls(nodes); len(calls) != 1 {
					t.Errorf("calls = %d, want 1 for the burst and none inside the cooldown", len(calls))
				}
				if _, ok := st.leaseOf(st.recIDForTest("app.example.com")); ok {
					t.Error("lease still held after the call's outcome was recorded")
				}
			})
		})
	}
}

// TestLeaseHolderDiesMidCall: the server holding the lease dies with its
// call in flight. No other server calls before the lease expires; one
// does, once, right when it expires, with the dead holder's
// Idempotency-Key, and the requests it holds are served by that call.
func TestLeaseHolderDiesMidCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		id := st.put(rec("app.example.com")).ID
		nodes := newCluster(t, st, newFakePool(), 2)
		a, b := nodes[0], nodes[1]
		a.caller.hold = make(chan struct{}) // never answers
		start := time.Now()
		if _, err := a.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(a.caller.made()); n != 1 {
			t.Fatalf("server A's calls = %d, want 1", n)
		}
		a.kill() // mid-call: no outcome is recorded, the lease stays
		if _, ok := st.leaseOf(id); !ok {
			t.Fatal("the dead holder's lease is gone, want it kept until it expires")
		}

		sb, err := b.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		ttl := (Config{}).LeaseTTL()
		advance(ttl - time.Millisecond - time.Since(start))
		if n := len(b.caller.made()); n != 0 {
			t.Fatalf("server B called %d times before the lease expired, want none", n)
		}
		select {
		case <-sb.Done():
			t.Fatal("server B's flight ended before the lease expired")
		default:
		}
		advance(time.Millisecond)
		calls := b.caller.made()
		if len(calls) != 1 {
			t.Fatalf("server B's calls at the lease's expiry = %d, want 1", len(calls))
		}
		if got, want := calls[0].at.Sub(start), ttl; got != want {
			t.Errorf("server B called %v after A took the lease, want %v (its expiry)", got, want)
		}
		if got, want := calls[0].IdempotencyKey, a.caller.made()[0].IdempotencyKey; got != want {
			t.Errorf("server B's Idempotency-Key = %q, want the dead holder's %q", got, want)
		}
		if err := sb.Err(); err != nil {
			t.Errorf("server B's flight = %v, want success", err)
		}
		advance(time.Minute)
		if n := len(b.caller.made()); n != 1 {
			t.Errorf("server B's calls = %d, want exactly 1", n)
		}
	})
}

// TestRestartHonoursPersistedCallState: a server started after a call
// (its own before a restart, or another server's) honours the cooldown
// the store recorded: requests join the accepted cold start, and no call
// is made until the cooldown ends. A failed call's backoff sends requests
// to the fallback chain at once, as on the server that made it.
func TestRestartHonoursPersistedCallState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		called := now.Add(-16 * time.Second)
		ok := rec("ok.example.com")
		ok.LastCallAt, ok.LastReason, ok.LastStatus = &called, string(ReasonColdStart), 202
		ok.NextCallAt = new(called.Add(ok.Cooldown))
		failed := rec("failed.example.com")
		failed.LastCallAt, failed.LastReason, failed.LastStatus = &called, string(ReasonColdStart), 503
		failed.ConsecutiveFailures, failed.LastError = 2, "autoscale: scaling hook answered 503"
		failed.NextCallAt = new(called.Add(4 * failed.Cooldown))
		h := newHarness(t, []Record{ok, failed})

		s, err := h.c.ColdStart(context.Background(), testOrg, "ok.example.com", "")
		if err != nil || s.Err() != nil {
			t.Fatalf("ColdStart(ok) = %v, %v; want the accepted flight", err, s.Err())
		}
		select {
		case <-s.Done():
		default:
			t.Error("ColdStart(ok) flight pending, want the call recorded before the restart, done")
		}
		f, err := h.c.ColdStart(context.Background(), testOrg, "failed.example.com", "")
		var ce *CallError
		if err != nil || !errors.As(f.Err(), &ce) || ce.Status != 503 {
			t.Fatalf("ColdStart(failed) = %v, flight %v; want the recorded 503", err, f.Err())
		}
		// Past cold_start, to the end of the cooldown: requests join, no
		// call is made; the first request after it calls.
		advance(time.Until(called.Add(ok.Cooldown)) - time.Millisecond)
		if _, err := h.c.ColdStart(context.Background(), testOrg, "ok.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(h.caller.made()); n != 0 {
			t.Fatalf("calls inside the recorded cooldown = %d, want none", n)
		}
		advance(time.Millisecond)
		if _, err := h.c.ColdStart(context.Background(), testOrg, "ok.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		calls := h.caller.made()
		if len(calls) != 1 || calls[0].Body.Hostname != "ok.example.com" || !calls[0].at.Equal(called.Add(ok.Cooldown)) {
			t.Errorf("calls = %+v, want one for ok.example.com right when the recorded cooldown ends", calls)
		}
	})
}

// TestInstanceDiedColdStartsAgain: the instance a cold start brought dies
// soon after. The next request does not join the old flight (which would
// hold it for the whole cold_start and end in 504): it makes a new call,
// which waits only for the cooldown.
func TestInstanceDiedColdStartsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.pool.set("app.example.com", func(el time.Duration) PoolStats {
			if el >= 5*time.Second && el < 10*time.Second {
				return pool(1, 0) // the instance, for five seconds
			}
			return PoolStats{}
		})
		first, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		advance(12 * time.Second)
		second, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		if second == first {
			t.Fatal("ColdStart after the instance died joined the served flight, want a new one")
		}
		advance(DefaultCooldown - 12*time.Second - time.Millisecond)
		if n := len(h.caller.made()); n != 1 {
			t.Fatalf("calls inside the cooldown = %d, want only the first", n)
		}
		advance(time.Millisecond)
		if got := h.callTimes(); len(got) != 2 || got[1] != DefaultCooldown {
			t.Errorf("calls at %v, want the second right when the cooldown ends (%v)", got, DefaultCooldown)
		}
		expectCall(t, h, 2, DefaultCooldown, ReasonColdStart, 0, 1)
	})
}

// TestReloadedCallAfterInstanceLeftColdStartsAgain: a call another server
// recorded while this server's pool was routable, taken in by a reload
// after the pool emptied, is not a flight to join: the instances it
// concerned came and left. The next request calls (the docker-compose step
// restart_server_right_after_cold_start_call held its burst 30 s with no
// call: every reload made a recorded call a fresh flight to join, until
// cold_start after it).
func TestReloadedCallAfterInstanceLeftColdStartsAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.ColdStart, r.Cooldown = time.Minute, 2*time.Second
		h := newHarness(t, []Record{r})
		h.pool.set("app.example.com", func(el time.Duration) PoolStats {
			if el >= 2*time.Second && el < 8*time.Second {
				return pool(1, 0)
			}
			return PoolStats{}
		})
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		advance(3 * time.Second)
		// Another server's scale out, accepted while the instance runs;
		// this server reads it at its next periodic reload.
		h.store.mu.Lock()
		for _, sr := range h.store.recs {
			at := time.Now()
			sr.LastCallAt, sr.LastReason, sr.LastStatus, sr.NextCallAt = &at, string(ReasonScaleOut), 202, new(at.Add(r.Cooldown))
		}
		h.store.mu.Unlock()
		advance(DefaultRefreshInterval - 3*time.Second + time.Second)
		if n := len(h.caller.made()); n != 1 {
			t.Fatalf("calls before the pool emptied = %d, want the first cold start only", n)
		}
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		want := DefaultRefreshInterval + time.Second
		if got := h.callTimes(); len(got) != 2 || got[1] != want {
			t.Errorf("calls at %v, want a second cold start at once (%v), not a join of the reloaded scale out", got, want)
		}
	})
}

// TestPlanLease: what a decision refused its lease does.
func TestPlanLease(t *testing.T) {
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { return new(now.Add(d)) }
	base := rec("app.example.com")
	with := func(f func(r *Record)) Record { r := base; f(&r); return r }
	live := store.ScalingLease{Holder: "srv_b", ExpiresAt: now.Add(10 * time.Second)}
	tests := []struct {
		name   string
		reason Reason
		rec    Record
		held   store.ScalingLease
		want   leasePlan
	}{
		{"cold start waits for a live lease", ReasonColdStart, base, live,
			leasePlan{wait: now.Add(10 * time.Second)}},
		{"scale out drops for a live lease", ReasonScaleOut, base, live,
			leasePlan{why: "another server is calling", nextAllowed: now.Add(10 * time.Second)}},
		{"disarmed", ReasonColdStart, with(func(r *Record) { r.Disarmed = true }), store.ScalingLease{},
			leasePlan{err: ErrDisarmed, why: "record disarmed"}},
		{"accepted cold start joined", ReasonColdStart, with(func(r *Record) {
			r.LastCallAt, r.LastReason, r.LastStatus, r.NextCallAt = at(-5*time.Second), "cold_start", 200, at(55*time.Second)
		}), store.ScalingLease{},
			leasePlan{acceptedAt: now.Add(-5 * time.Second), why: "another server's cold start is under way", nextAllowed: now.Add(55 * time.Second)}},
		{"failed call ends the cold start", ReasonColdStart, with(func(r *Record) {
			r.LastCallAt, r.LastReason, r.LastStatus, r.NextCallAt = at(-5*time.Second), "cold_start", 500, at(115*time.Second)
		}), store.ScalingLease{},
			leasePlan{err: &CallError{Status: 500}, why: "another server's call failed", nextAllowed: now.Add(115 * time.Second)}},
		{"old accepted call: wait for the cooldown", ReasonColdStart, with(func(r *Record) {
			r.LastCallAt, r.LastReason, r.LastStatus, r.NextCallAt = at(-50*time.Second), "cold_start", 200, at(10*time.Second)
		}), store.ScalingLease{},
			leasePlan{wait: now.Add(10 * time.Second), nextAllowed: now.Add(10 * time.Second)}},
		{"penalty: wait for it", ReasonColdStart, with(func(r *Record) {
			r.PenaltyUntil = at(3 * time.Second)
		}), store.ScalingLease{},
			leasePlan{wait: now.Add(3 * time.Second), nextAllowed: now.Add(3 * time.Second)}},
		{"sampled decision after another's call", ReasonScaleIn, with(func(r *Record) {
			r.LastCallAt, r.LastReason, r.LastStatus, r.NextCallAt = at(-time.Second), "scale_in", 200, at(59*time.Second)
		}), store.ScalingLease{},
			leasePlan{why: "another server called", nextAllowed: now.Add(59 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planLease(leaseIn{reason: tt.reason, rec: tt.rec, held: tt.held, since: now.Add(-time.Second), now: now})
			if !got.wait.Equal(tt.want.wait) || !got.acceptedAt.Equal(tt.want.acceptedAt) || !got.nextAllowed.Equal(tt.want.nextAllowed) ||
				got.why != tt.want.why || fmt.Sprint(got.err) != fmt.Sprint(tt.want.err) {
				t.Errorf("planLease() = wait %v, err %v, accepted %v, why %q, next %v; want %v, %v, %v, %q, %v",
					got.wait, got.err, got.acceptedAt, got.why, got.nextAllowed,
					tt.want.wait, tt.want.err, tt.want.acceptedAt, tt.want.why, tt.want.nextAllowed)
			}
		})
	}
}

// TestPlanLeaseAfterInstanceLeft: a cold start refused its lease by a
// recorded cold start's cooldown does not join that call when this server
// saw the pool routable after it (its instance came and left): it waits
// for the cooldown and calls.
func TestPlanLeaseAfterInstanceLeft(t *testing.T) {
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	r := rec("app.example.com")
	r.LastCallAt, r.LastReason, r.LastStatus, r.NextCallAt = new(now.Add(-20*time.Second)), "cold_start", 202, new(now.Add(time.Second))
	got := planLease(leaseIn{reason: ReasonColdStart, rec: r, since: now.Add(-time.Second), now: now, routable: now.Add(-3 * time.Second)})
	if !got.wait.Equal(now.Add(time.Second)) || !got.acceptedAt.IsZero() || got.err != nil {
		t.Errorf("planLease() = wait %v, accepted %v, err %v, why %q; want to wait for the cooldown (%v) and call",
			got.wait, got.acceptedAt, got.err, got.why, now.Add(time.Second))
	}
}

// TestAcceptedCallToJoin: a server whose pool is empty joins (waits for)
// an accepted cold start or scale out another server recorded less than
// cold_start ago, and calls otherwise (the docker-compose step
// restart_server_right_after_cold_start_call: a restarted server called a
// second cold start, desired 1 while 2 ran, after the other server's
// scale out replaced the recorded cold start).
func TestAcceptedCallToJoin(t *testing.T) {
	now := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	for _, tc := range []struct {
		name   string
		reason Reason
		at     *time.Time
		status int
		// routable is when the pool was last seen routable; nil: never.
		routable *time.Time
		join     bool
	}{
		{"cold start accepted", ReasonColdStart, ago(10 * time.Second), 202, nil, true},
		{"scale out accepted", ReasonScaleOut, ago(10 * time.Second), 202, nil, true},
		{"scale in", ReasonScaleIn, ago(10 * time.Second), 202, nil, false},
		{"scale out refused", ReasonScaleOut, ago(10 * time.Second), 500, nil, false},
		{"scale out too long ago", ReasonScaleOut, ago(2 * time.Minute), 202, nil, false},
		{"no call", ReasonColdStart, nil, 0, nil, false},
		// The docker-compose step restart_server_right_after_cold_start_call
		// held its burst 30 s with no call: the instance of a cold start
		// accepted 40 s before had come, served and retired idle.
		{"cold start whose instance came and left", ReasonColdStart, ago(40 * time.Second), 202, ago(5 * time.Second), false},
		{"scale out the pool was routable after", ReasonScaleOut, ago(10 * time.Second), 202, ago(9 * time.Second), false},
		{"cold start, routable only before it", ReasonColdStart, ago(10 * time.Second), 202, ago(11 * time.Second), true},
	} {
		r := Record{Scaling: Declaration{ColdStart: time.Minute}, LastCallAt: tc.at, LastReason: string(tc.reason), LastStatus: tc.status}
		var routable time.Time
		if tc.routable != nil {
			routable = *tc.routable
		}
		if got := !acceptedColdStart(&r, now, routable).IsZero(); got != tc.join {
			t.Errorf("%s: join = %v, want %v", tc.name, got, tc.join)
		}
	}
}
