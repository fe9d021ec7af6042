package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// Issue #42, "Correctness across servers": servers sharing a real store
// (SQLite, opened inside the synctest bubble, its clock the bubble's).

// sqlCluster is servers sharing one real store.
type sqlCluster struct {
	db    *store.DB
	org   string
	pool  *fakePool
	nodes []*node
}

// newSQLCluster opens a SQLite store from cfg (made outside the bubble)
// whose clock is the bubble's, with one organization. It must run inside
// synctest.Test.
func newSQLCluster(t *testing.T, cfg store.Config) *sqlCluster {
	t.Helper()
	cfg.Now = time.Now // the bubble's clock is the store's
	db, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	org, err := db.CreateOrg(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	return &sqlCluster{db: db, org: org.ID, pool: newFakePool()}
}

// declare stores r's declaration in the cluster's organization.
func (cl *sqlCluster) declare(t *testing.T, r Record) Record {
	t.Helper()
	r.OrgID = cl.org
	got, _, err := cl.db.DeclareScaling(context.Background(), r, "tok_0", true)
	if err != nil {
		t.Fatalf("DeclareScaling: %v", err)
	}
	return got
}

// start starts one more server: holder name, clock skew, caller and
// budget (0: the tests' large one).
func (cl *sqlCluster) start(t *testing.T, holder string, skew time.Duration, caller Caller, perMinute int) *node {
	t.Helper()
	if perMinute == 0 {
		perMinute = 600_000
	}
	c, err := New(Config{Store: cl.db, Pool: cl.pool, Caller: caller, MaxCallsPerMinute: perMinute, Holder: holder,
		Now: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	n := &node{c: c, kill: runNode(t, c)}
	switch c := caller.(type) {
	case *fakeCaller:
		n.caller = c
	case providerCaller:
		n.caller = c.fakeCaller
	}
	cl.nodes = append(cl.nodes, n)
	synctest.Wait()
	return n
}

// coldStart asks n for a cold start of host, failing the test on error.
func (cl *sqlCluster) coldStart(t *testing.T, n *node, host string) *Start {
	t.Helper()
	s, err := n.c.ColdStart(context.Background(), cl.org, host, "")
	if err != nil {
		t.Fatalf("ColdStart(%s) = %v", host, err)
	}
	return s
}

// TestStaleLeaseKeyOnlyForATakeover (item 1): a holder killed mid-call
// leaves its lease row behind. (a) Another server taking over when the
// lease expires, within one lease lifetime, sends the dead holder's
// Idempotency-Key: the provider may have acted on it. (b) A cold start an
// hour later is a new decision and gets a new key, so a provider that
// remembers keys does not answer it 2xx without scaling.
func TestStaleLeaseKeyOnlyForATakeover(t *testing.T) {
	for _, tt := range []struct {
		name  string
		later time.Duration // from the kill to the second server's cold start
		same  bool
	}{
		{"takeover within the lease lifetime", 0, true},
		{"a decision an hour later", time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := storetest.SQLite(t)
			synctest.Test(t, func(t *testing.T) {
				cl := newSQLCluster(t, cfg)
				cl.declare(t, rec("app.example.com"))
				dead := &fakeCaller{hold: make(chan struct{})} // never answers
				a := cl.start(t, "srv_a", 0, dead, 0)
				cl.coldStart(t, a, "app.example.com")
				synctest.Wait()
				if len(dead.made()) != 1 {
					t.Fatalf("calls of the holder = %d, want 1", len(dead.made()))
				}
				a.kill() // mid-call: no outcome, the lease row stays
				advance(tt.later)

				b := cl.start(t, "srv_b", 0, &fakeCaller{}, 0)
				s := cl.coldStart(t, b, "app.example.com")
				advance(DefaultConfig().LeaseTTL())
				calls := b.caller.made()
				if len(calls) != 1 {
					t.Fatalf("calls of the second server = %d, want 1", len(calls))
				}
				if err := s.Err(); err != nil {
					t.Fatalf("second server's flight = %v", err)
				}
				deadKey, key := dead.made()[0].IdempotencyKey, calls[0].IdempotencyKey
				if got := deadKey == key; got != tt.same {
					t.Errorf("second call's key %s, dead holder's %s: same = %v, want %v", key, deadKey, got, tt.same)
				}
				if gen, deadGen := calls[0].Body.LeaseGeneration, dead.made()[0].Body.LeaseGeneration; gen <= deadGen || deadGen <= 0 {
					t.Errorf("lease generations: dead holder %d, second %d; want positive and rising", deadGen, gen)
				}
			})
		})
	}
}

// TestSkewedServerAgrees (item 2): a server whose clock is a minute ahead
// or behind decides the shared times as the others do. Server A makes an
// accepted cold start of a slow-booting service (cold_start 45 s, cooldown
// 30 s); server B, skewed, joins it 35 s later instead of calling again
// (ahead, it would think the join window long over), and 50 s after it,
// with the join window and the cooldown over and still no instance,
// calls at once (behind, it would still think itself inside both).
func TestSkewedServerAgrees(t *testing.T) {
	for _, skew := range []time.Duration{time.Minute, -time.Minute} {
		t.Run(fmt.Sprintf("skew %v", skew), func(t *testing.T) {
			cfg := storetest.SQLite(t)
			synctest.Test(t, func(t *testing.T) {
				cl := newSQLCluster(t, cfg)
				r := rec("app.example.com")
				r.ColdStart, r.Cooldown = 45*time.Second, 30*time.Second
				cl.declare(t, r)
				a := cl.start(t, "srv_a", 0, &fakeCaller{}, 0)
				b := cl.start(t, "srv_b", skew, &fakeCaller{}, 0)
				t0 := time.Now()
				sa := cl.coldStart(t, a, "app.example.com")
				synctest.Wait()
				if sa.Err() != nil {
					t.Fatalf("A's cold start = %v", sa.Err())
				}
				advance(35 * time.Second)
				s := cl.coldStart(t, b, "app.example.com")
				synctest.Wait()
				if n := len(b.caller.made()); n != 0 {
					t.Fatalf("B called %d times 35 s into A's cold start (cold_start 45 s); want it to join", n)
				}
				select {
				case <-s.Done():
				default:
					t.Errorf("B's flight 35 s into A's accepted cold start is pending; want joined")
				}
				advance(15 * time.Second)
				cl.coldStart(t, b, "app.example.com")
				advance(time.Second)
				calls := b.caller.made()
				if len(calls) != 1 {
					t.Fatalf("B's calls 50 s after A's (join window and cooldown over) = %d, want 1 at once", len(calls))
				}
				if at := calls[0].at.Sub(t0); at > 51*time.Second {
					t.Errorf("B called %v after A, want by 51 s", at)
				}
				if n := len(a.caller.made()); n != 1 {
					t.Errorf("A's calls = %d, want 1", n)
				}
			})
		})
	}
}

// fencingProvider acts on a call unless it carries a lease generation
// lower than one it has seen for the same hostname and path (the rule
// docs/autoscaling.md gives provider authors), and counts its actions.
type fencingProvider struct {
	mu      sync.Mutex
	highest map[string]int64
	actions []HookBody
	refused int
}

func (p *fencingProvider) serve(c HookCall) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := c.Body.Hostname + c.Body.Path
	if g := c.Body.LeaseGeneration; g > 0 {
		if g < p.highest[k] {
			p.refused++
			return 409
		}
		p.highest[k] = g
	}
	p.actions = append(p.actions, c.Body)
	return 202
}

// providerCaller delivers each call to a fencingProvider after stall,
// ignoring the call's context as a paused process does (a stall past the
// call timeout and the lease).
type providerCaller struct {
	p     *fencingProvider
	stall time.Duration
	*fakeCaller
}

func (c providerCaller) Call(ctx context.Context, h HookCall) (int, time.Duration, error) {
	c.fakeCaller.Call(ctx, h) // recorded
	time.Sleep(c.stall)
	return c.p.serve(h), 0, nil
}

// TestStalledHolderFenced (item 3): server A takes the lease and stalls
// before its call reaches the provider, past its lease; server B takes
// the lease over and calls. A's call arrives later, under the older
// generation: the provider refuses it, so exactly one scaling action
// results, and A's outcome does not overwrite B's.
func TestStalledHolderFenced(t *testing.T) {
	cfg := storetest.SQLite(t)
	synctest.Test(t, func(t *testing.T) {
		cl := newSQLCluster(t, cfg)
		r := cl.declare(t, rec("app.example.com"))
		p := &fencingProvider{highest: map[string]int64{}}
		ttl := DefaultConfig().LeaseTTL()
		a := cl.start(t, "srv_a", 0, providerCaller{p, ttl + 10*time.Second, &fakeCaller{}}, 0)
		b := cl.start(t, "srv_b", 0, providerCaller{p, 0, &fakeCaller{}}, 0)
		cl.coldStart(t, a, "app.example.com")
		synctest.Wait()
		sb := cl.coldStart(t, b, "app.example.com")
		advance(ttl + 20*time.Second)

		if n := len(a.caller.made()) + len(b.caller.made()); n != 2 {
			t.Fatalf("calls made = %d, want 2 (the stalled holder's and its successor's)", n)
		}
		if len(p.actions) != 1 || p.refused != 1 {
			t.Fatalf("provider actions = %d (%+v), refused %d; want exactly 1 action and the stale call refused", len(p.actions), p.actions, p.refused)
		}
		if err := sb.Err(); err != nil {
			t.Errorf("B's flight = %v, want its call's success", err)
		}
		got, err := cl.db.ScalingRecord(context.Background(), "", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.LastStatus != 202 || got.ConsecutiveFailures != 0 {
			t.Errorf("record after both outcomes: last status %d, failures %d; want B's 202 and no failure", got.LastStatus, got.ConsecutiveFailures)
		}
	})
}

// TestBudgetSharedAcrossServers (item 4): the calls-per-minute budget is
// the store's, shared: two servers with a budget of one call a minute
// cold-start two different hostnames at once, and the second call waits
// for the budget's next call, a minute on, instead of each server
// spending a budget of its own.
func TestBudgetSharedAcrossServers(t *testing.T) {
	cfg := storetest.SQLite(t)
	synctest.Test(t, func(t *testing.T) {
		cl := newSQLCluster(t, cfg)
		cl.declare(t, rec("one.example.com"))
		cl.declare(t, rec("two.example.com"))
		a := cl.start(t, "srv_a", 0, &fakeCaller{}, 1)
		b := cl.start(t, "srv_b", 0, &fakeCaller{}, 1)
		t0 := time.Now()
		cl.coldStart(t, a, "one.example.com")
		cl.coldStart(t, b, "two.example.com")
		synctest.Wait()
		if n := len(allCalls(cl.nodes)); n != 1 {
			t.Fatalf("calls at once with a shared budget of 1/min = %d, want 1", n)
		}
		advance(59 * time.Second)
		if n := len(allCalls(cl.nodes)); n != 1 {
			t.Fatalf("calls 59 s on = %d, want still 1", n)
		}
		advance(2 * time.Second)
		calls := allCalls(cl.nodes)
		if len(calls) != 2 {
			t.Fatalf("calls 61 s on = %d, want 2", len(calls))
		}
		if at := calls[1].at.Sub(t0); at < time.Minute {
			t.Errorf("second call at %v, want a minute on", at)
		}
	})
}

// TestReleaseNoticeMidAttemptWakes (item 5): server B's cold start finds
// server A's lease live; A's call fails and its release notice reaches B
// while B's lease attempt is still returning. B's held visitors take the
// fallback chain at once, not when A's lease would have expired.
func TestReleaseNoticeMidAttemptWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		st.put(rec("app.example.com"))
		nodes := newCluster(t, st, newFakePool(), 2)
		a, b := nodes[0], nodes[1]
		hold := make(chan struct{})
		a.caller.hold = hold
		a.caller.answer = func(int, HookCall) (int, time.Duration, error) { return 503, 0, nil }
		gate := make(chan struct{})
		st.onRefused = func(holder string) {
			if holder == "srv_1" {
				<-gate
			}
		}
		if _, err := a.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s, err := b.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // B's attempt is refused, and held before it returns
		close(hold)     // A's call fails; its outcome and release notice reach B
		synctest.Wait()
		st.onRefused = nil
		close(gate)
		advance(time.Millisecond) // B's retry paces on its own start budget

		select {
		case <-s.Failed():
			var ce *CallError
			if !errors.As(s.Err(), &ce) || ce.Status != 503 {
				t.Errorf("B's flight = %v, want A's 503", s.Err())
			}
		default:
			t.Fatal("B's flight still pending after A's failed call was released; want it failed at once")
		}
		if n := len(b.caller.made()); n != 0 {
			t.Errorf("B made %d calls inside A's backoff, want 0", n)
		}
	})
}

// TestRestartRestoresProviderPenaltyForOtherHostnames (issue #42 item 6,
// the audit's surviving mutant M6): a provider's stored 429 penalty and
// Retry-After, recorded on one record, hold after a restart for every
// record calling that provider: a cold start of another hostname at the
// same provider host waits for the penalty's end, then calls.
func TestRestartRestoresProviderPenaltyForOtherHostnames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		penalized := rec("app.example.com")
		until := time.Now().Add(2 * time.Minute)
		last := time.Now().Add(-time.Second)
		penalized.LastCallAt, penalized.LastReason, penalized.LastStatus = &last, string(ReasonScaleOut), 429
		penalized.PenaltyUntil = &until
		other := rec("api.example.com") // same provider host, hooks.example
		if hostOf(penalized.URL) != hostOf(other.URL) {
			t.Fatalf("provider hosts %s and %s differ", hostOf(penalized.URL), hostOf(other.URL))
		}
		h := newHarness(t, []Record{penalized, other})
		if _, err := h.c.ColdStart(context.Background(), testOrg, "api.example.com", ""); err != nil {
			t.Fatal(err)
		}
		advance(2*time.Minute - time.Second)
		if n := len(h.caller.made()); n != 0 {
			t.Fatalf("calls to the penalized provider inside its penalty = %d, want 0", n)
		}
		advance(2 * time.Second)
		calls := h.caller.made()
		if len(calls) != 1 || calls[0].Body.Hostname != "api.example.com" {
			t.Fatalf("calls after the penalty = %+v, want api.example.com's cold start", calls)
		}
		if at := h.at(calls[0]); at < 2*time.Minute {
			t.Errorf("call at %v, want at the penalty's end (2m)", at)
		}
	})
}

// TestSkewedServerTakesOverAtExpiry (item 2, lease expiry): the holder
// dies mid-call; a server whose clock is a minute off takes the lease
// over when it expires by the store's clock (15 s), not a minute later
// (clock behind) nor by retrying a live lease in a loop (clock ahead).
func TestSkewedServerTakesOverAtExpiry(t *testing.T) {
	for _, skew := range []time.Duration{-time.Minute, time.Minute} {
		t.Run(fmt.Sprintf("skew %v", skew), func(t *testing.T) {
			cfg := storetest.SQLite(t)
			synctest.Test(t, func(t *testing.T) {
				cl := newSQLCluster(t, cfg)
				cl.declare(t, rec("app.example.com"))
				dead := &fakeCaller{hold: make(chan struct{})}
				a := cl.start(t, "srv_a", 0, dead, 0)
				b := cl.start(t, "srv_b", skew, &fakeCaller{}, 0)
				t0 := time.Now()
				cl.coldStart(t, a, "app.example.com")
				synctest.Wait()
				a.kill()
				cl.coldStart(t, b, "app.example.com")
				ttl := DefaultConfig().LeaseTTL()
				advance(ttl - time.Second)
				if n := len(b.caller.made()); n != 0 {
					t.Fatalf("B called %d times before the lease expired", n)
				}
				advance(2 * time.Second)
				calls := b.caller.made()
				if len(calls) != 1 {
					t.Fatalf("B's calls just after the lease expired = %d, want 1", len(calls))
				}
				if at := calls[0].at.Sub(t0); at < ttl || at > ttl+time.Second {
					t.Errorf("takeover at %v, want at the lease's expiry %v", at, ttl)
				}
			})
		})
	}
}
