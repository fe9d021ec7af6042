package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/tunnel"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// providerCall is one call a test provider received.
type providerCall struct {
	at  time.Time
	key string // its Idempotency-Key
	gen string // its Aperio-Lease-Generation
}

// testProvider is a scaling hook that records every call. While hold is
// open it answers nothing, until the caller gives up; then it answers 202.
type testProvider struct {
	mu    sync.Mutex
	calls []providerCall
	hold  chan struct{} // closed: answer; nil: answer at once
	first chan struct{} // closed when the first call arrives
}

func newTestProvider() *testProvider {
	return &testProvider{hold: make(chan struct{}), first: make(chan struct{})}
}

func (p *testProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.calls = append(p.calls, providerCall{time.Now(), r.Header.Get("Idempotency-Key"), r.Header.Get("Aperio-Lease-Generation")})
	if len(p.calls) == 1 {
		close(p.first)
	}
	hold := p.hold
	p.mu.Unlock()
	select {
	case <-hold:
	case <-r.Context().Done():
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (p *testProvider) made() []providerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]providerCall(nil), p.calls...)
}

// clusterOn seeds a PostgreSQL database with one armed record for
// app.test calling hook, and starts n servers on it with autoscaling on.
//
// edit, when given, changes server i's configuration before it starts.
func clusterOn(t *testing.T, n int, hook string, edit ...func(i int, cfg *server.Config)) ([]*testServer, string) {
	t.Helper()
	return clusterOnHosts(t, n, hook, []string{"app.test"}, edit...)
}

// clusterOnHosts is clusterOn with one armed record for each of hosts.
func clusterOnHosts(t *testing.T, n int, hook string, hosts []string, edit ...func(i int, cfg *server.Config)) ([]*testServer, string) {
	t.Helper()
	dsn := storetest.PostgresDSN(t) // skips, naming the variable, without PostgreSQL
	ctx := t.Context()
	db := openStoreOn(t, dsn)
	org, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if _, _, err := db.DeclareScaling(ctx, store.ScalingRecord{OrgID: org.ID, Hostname: h, Scaling: tunnel.Scaling{URL: hook, Max: 1, ColdStart: time.Minute, Window: time.Second, Cooldown: time.Minute, TargetUtilization: 0.8}}, "master", true); err != nil {
			t.Fatal(err)
		}
	}
	cfg := serverConfig(t)
	cfg.Store.DatabaseURL = dsn
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	servers := make([]*testServer, n)
	for i := range n {
		c := cfg
		for _, e := range edit {
			e(i, &c)
		}
		servers[i] = startServer(t, c, nil, nil)
	}
	return servers, org.ID
}

// awaitFlight waits, at most until the test's deadline budget, for a
// flight to end and returns its error.
func awaitFlight(t *testing.T, done <-chan struct{}, errf func() error, budget time.Duration) error {
	t.Helper()
	tm := time.NewTimer(budget)
	defer tm.Stop()
	select {
	case <-done:
		return errf()
	case <-tm.C:
		t.Fatalf("cold start flight not over after %v", budget)
		return nil
	}
}

// TestOneCallAcrossServersPostgres: two, then three, servers on one
// PostgreSQL database; a burst of cold starts split across them makes
// exactly one provider call, and every server's flight succeeds with it,
// as if each had called. Inside the cooldown no server calls again.
func TestOneCallAcrossServersPostgres(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d servers", n), func(t *testing.T) {
			p := newTestProvider()
			hook := startBackend(t, p)
			servers, org := clusterOn(t, n, hook.URL)
			ctx := t.Context()
			const burst = 60
			type flight struct {
				done <-chan struct{}
				err  func() error
			}
			flights := make([]flight, burst)
			errs := make([]error, burst)
			var wg sync.WaitGroup
			for i := range burst {
				wg.Go(func() {
					flights[i].done, flights[i].err, errs[i] = servers[i%n].gw.ColdStartDoneForTest(ctx, org, "app.test", "")
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("cold start #%d on server %d = %v", i, i%n, err)
				}
			}
			select {
			case <-p.first:
			case <-time.After(30 * time.Second):
				t.Fatal("no provider call within 30 s")
			}
			close(p.hold)
			for i, f := range flights {
				if err := awaitFlight(t, f.done, f.err, 30*time.Second); err != nil {
					t.Errorf("flight #%d on server %d = %v, want the one call's success", i, i%n, err)
				}
			}
			// Every server asks again inside the cooldown: all join.
			for i, s := range servers {
				done, errf, err := s.gw.ColdStartDoneForTest(ctx, org, "app.test", "")
				if err != nil {
					t.Fatalf("cold start on server %d inside the cooldown = %v", i, err)
				}
				if err := awaitFlight(t, done, errf, 30*time.Second); err != nil {
					t.Errorf("cold start on server %d inside the cooldown = %v, want the accepted flight", i, err)
				}
			}
			if calls := p.made(); len(calls) != 1 {
				t.Errorf("provider calls = %d, want exactly 1 for %d servers", len(calls), n)
			}
		})
	}
}

// TestLeaseHolderKilledPostgres: the server holding the lease dies with
// its call in flight. No other server calls before the lease expires;
// exactly one does after it, with the dead holder's Idempotency-Key.
func TestLeaseHolderKilledPostgres(t *testing.T) {
	t.Parallel()
	p := newTestProvider()
	hook := startBackend(t, p)
	servers, org := clusterOn(t, 3, hook.URL)
	a := servers[0]
	ctx := t.Context()
	if err := a.gw.ColdStartForTest(ctx, org, "app.test", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.first:
	case <-time.After(30 * time.Second):
		t.Fatal("server A made no call within 30 s")
	}
	if err := a.stop(); err != nil { // mid-call: the outcome is never recorded
		t.Fatalf("stopping server A = %v", err)
	}
	// The provider answers from now on; the dead holder's lease stands.
	p.mu.Lock()
	close(p.hold)
	p.mu.Unlock()

	type flight struct {
		done <-chan struct{}
		err  func() error
	}
	var flights []flight
	for _, s := range servers[1:] {
		done, errf, err := s.gw.ColdStartDoneForTest(ctx, org, "app.test", "")
		if err != nil {
			t.Fatal(err)
		}
		flights = append(flights, flight{done, errf})
	}
	ttl := autoscale.Config{}.LeaseTTL()
	for i, f := range flights {
		if err := awaitFlight(t, f.done, f.err, ttl+30*time.Second); err != nil {
			t.Errorf("flight on server %d = %v, want the takeover call's success", i+1, err)
		}
	}
	calls := p.made()
	if len(calls) != 2 {
		t.Fatalf("provider calls = %d, want 2: the dead holder's and one takeover", len(calls))
	}
	// The lease was taken just before A's call reached the provider: the
	// takeover comes a full lease later, give or take the time A took to
	// reach the provider (bounded here by a second).
	if gap := calls[1].at.Sub(calls[0].at); gap < ttl-time.Second {
		t.Errorf("takeover call %v after the dead holder's, want no sooner than the lease's %v", gap, ttl)
	}
	if calls[1].key != calls[0].key || calls[0].key == "" {
		t.Errorf("takeover Idempotency-Key = %q, want the dead holder's %q", calls[1].key, calls[0].key)
	}
	// The takeover is fenced above the dead holder's call.
	dead, taker, err1 := 0, 0, error(nil)
	if _, err1 = fmt.Sscan(calls[0].gen, &dead); err1 == nil {
		_, err1 = fmt.Sscan(calls[1].gen, &taker)
	}
	if err1 != nil || dead <= 0 || taker <= dead {
		t.Errorf("Aperio-Lease-Generation: dead holder %q, takeover %q; want positive and rising", calls[0].gen, calls[1].gen)
	}
}

// TestSkewedServerPostgres (issue #42 item 2): server B's clock runs a
// minute ahead of server A's and of the database's. A's cold start is
// accepted; B, asked a moment later, joins it (the join window is
// cold_start, a minute, from A's call by the database's clock) instead of
// waiting out the cooldown and calling again.
func TestSkewedServerPostgres(t *testing.T) {
	t.Parallel()
	p := newTestProvider()
	close(p.hold) // answers at once
	hook := startBackend(t, p)
	servers, org := clusterOn(t, 2, hook.URL, func(i int, cfg *server.Config) {
		if i == 1 {
			cfg.Scaling.Now = func() time.Time { return time.Now().Add(time.Minute) }
		}
	})
	ctx := t.Context()
	done, errf, err := servers[0].gw.ColdStartDoneForTest(ctx, org, "app.test", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := awaitFlight(t, done, errf, 30*time.Second); err != nil {
		t.Fatalf("A's cold start = %v", err)
	}
	// B hears of A's call through the change feed; give it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for !servers[1].gw.JoinsColdStartForTest(ctx, org, "app.test", "") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	done, errf, err = servers[1].gw.ColdStartDoneForTest(ctx, org, "app.test", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := awaitFlight(t, done, errf, 5*time.Second); err != nil {
		t.Errorf("B's cold start = %v, want A's accepted one joined", err)
	}
	time.Sleep(time.Second) // a second call, if any, would be made by now
	if calls := p.made(); len(calls) != 1 {
		t.Errorf("provider calls = %d, want 1: the skewed server joins", len(calls))
	}
}

// TestNewRecordArmedAtOnceOnEveryServer: a record created through one
// server is armed on the others as soon as the change feed delivers it,
// not after the debounced reload a second later.
func TestNewRecordArmedAtOnceOnEveryServer(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresDSN(t)
	ctx := t.Context()
	db := openStoreOn(t, dsn)
	org, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	cfg := serverConfig(t)
	cfg.Store.DatabaseURL = dsn
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	declare := func(host string) store.ScalingRecord {
		t.Helper()
		rec, _, err := db.DeclareScaling(ctx, store.ScalingRecord{OrgID: org.ID, Hostname: host, Scaling: tunnel.Scaling{URL: "http://127.0.0.1:1/", ColdStart: time.Minute, Window: time.Second, Cooldown: time.Minute, TargetUtilization: 0.8}}, "master", true)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// A record B loads at start, then deletes through the feed (the
	// debounced path): once B no longer arms it, B is watching the feed.
	warmup := declare("warmup.test")
	b := startServer(t, cfg, nil, nil)
	poll(t, 30*time.Second, func() (bool, string) {
		return b.gw.ArmedForTest("warmup.test", ""), "server B does not arm warmup.test"
	})
	if err := db.DeleteScalingRecord(ctx, "", warmup.ID); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, func() (bool, string) {
		return !b.gw.ArmedForTest("warmup.test", ""), "server B still arms the deleted warmup.test"
	})

	start := time.Now()
	declare("new.test")
	poll(t, 10*time.Second, func() (bool, string) {
		return b.gw.ArmedForTest("new.test", ""), "server B does not arm new.test"
	})
	// The debounced reload fires a second after the change: arming before
	// it proves the record was armed on delivery.
	took := time.Since(start)
	if took >= time.Second {
		t.Errorf("server B armed the new record %v after it was created, want it at the change's delivery, under the 1 s debounce", took)
	}
	t.Logf("server B armed the new record %v after it was created", took.Round(time.Millisecond))
}

// TestBudgetSharedPostgres (issue #42 item 4): two servers on PostgreSQL,
// each with scaling_max_calls_per_minute 1, cold-start two different
// hostnames at once: the budget is the database's, shared, so one call is
// made and the other waits for the budget's next call (a minute), where
// two budgets of their own would have let both call at once.
func TestBudgetSharedPostgres(t *testing.T) {
	t.Parallel()
	p := newTestProvider()
	close(p.hold) // answers at once
	hook := startBackend(t, p)
	servers, org := clusterOnHosts(t, 2, hook.URL, []string{"one.test", "two.test"}, func(_ int, cfg *server.Config) {
		cfg.Scaling.MaxCallsPerMinute = 1
	})
	ctx := t.Context()
	for i, h := range []string{"one.test", "two.test"} {
		if err := servers[i].gw.ColdStartForTest(ctx, org, h, ""); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.first:
	case <-time.After(30 * time.Second):
		t.Fatal("no provider call within 30 s")
	}
	time.Sleep(3 * time.Second) // the second call, without a shared budget, comes at once
	if calls := p.made(); len(calls) != 1 {
		t.Errorf("provider calls within 3 s = %d, want 1 with a shared budget of 1 a minute", len(calls))
	}
}

// TestChangeBetweenNewAndServeNotMissed: a change another server commits
// after this one read the store in New but before Serve subscribed to the
// change feed (a record deleted while this server starts) is not missed:
// Serve subscribes, then re-reads what New read. Before, the notification
// reached no subscriber and the server kept the deleted record armed
// until something else made it reload.
func TestChangeBetweenNewAndServeNotMissed(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresDSN(t)
	ctx := t.Context()
	db := openStoreOn(t, dsn)
	org, err := db.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := db.DeclareScaling(ctx, store.ScalingRecord{OrgID: org.ID, Hostname: "gone.test", Scaling: tunnel.Scaling{URL: "http://127.0.0.1:1/", ColdStart: time.Minute, Window: time.Second, Cooldown: time.Minute, TargetUtilization: 0.8}}, "master", true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serverConfig(t)
	cfg.Store.DatabaseURL = dsn
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	gw, err := server.New(context.Background(), cfg, server.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !gw.ArmedForTest("gone.test", "") {
		t.Fatal("New did not arm gone.test, declared before it started")
	}
	// The other server deletes the record now, and its notification
	// arrives before this server serves: a third server's subscription
	// sees it, so this one's listening connection has it too.
	watcher := openStoreOn(t, dsn).Subscribe(ctx)
	if err := db.DeleteScalingRecord(ctx, "", rec.ID); err != nil {
		t.Fatal(err)
	}
	for c := range watcher {
		if c.Kind == store.ChangeScalingDeleted && c.ID == rec.ID {
			break
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(sctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	poll(t, 5*time.Second, func() (bool, string) {
		return !gw.ArmedForTest("gone.test", ""), "the server still arms gone.test, deleted between its New and its Serve"
	})
}
