package server_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/server/servertest"
	"github.com/aperio-dev/aperio/tunnel"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// startServerOn serves cfg with db as its store (closed by the caller's
// cleanup, after the server stops).
func startServerOn(t testing.TB, cfg server.Config, db *store.DB) *testServer {
	t.Helper()
	return fromKit(servertest.StartOn(t, cfg, db))
}

// openStoreOn opens the store at the PostgreSQL dsn, closed at cleanup
// (after the servers started later stop).
func openStoreOn(t testing.TB, dsn string) *store.DB {
	t.Helper()
	return openStoreWith(t, store.Config{DatabaseURL: dsn})
}

// openStoreWith opens the store of cfg, closed at cleanup (after the
// servers started later stop).
func openStoreWith(t testing.TB, cfg store.Config) *store.DB {
	t.Helper()
	return servertest.OpenStore(t, cfg)
}

// TestDisarmSeenByEveryServer runs two servers on one PostgreSQL database:
// a record disarmed on one, by its breaker and then through its API,
// reaches the other server's controller through the change feed, well
// before its 30 s periodic reload, and the other server never calls the
// hook of a record disarmed elsewhere.
func TestDisarmSeenByEveryServer(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresDSN(t) // skips, naming the variable, without PostgreSQL
	var hookCalls atomic.Int64
	hook := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hookCalls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	ctx := t.Context()
	dbA := openStoreOn(t, dsn)
	org, err := dbA.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	declare := func(host string) store.ScalingRecord {
		t.Helper()
		rec, _, err := dbA.DeclareScaling(ctx, store.ScalingRecord{OrgID: org.ID, Hostname: host, Scaling: tunnel.Scaling{URL: hook.URL, Max: 1, ColdStart: time.Minute, Window: time.Second, Cooldown: time.Second, TargetUtilization: 0.8}}, "master", true)
		if err != nil {
			t.Fatalf("DeclareScaling(%s) = %v", host, err)
		}
		return rec
	}
	// One failure short of the breaker, before either server starts: both
	// load it so.
	app := declare("app.test")
	if _, err := dbA.RecordScalingCall(ctx, app.ID, store.ScalingCall{At: time.Now(), Reason: "cold_start", Status: 500, ConsecutiveFailures: autoscale.MaxFailures - 1}); err != nil {
		t.Fatal(err)
	}

	cfg := serverConfig(t)
	cfg.Store.DatabaseURL = dsn
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	a := startServerOn(t, cfg, dbA)
	b := startServer(t, cfg, nil, nil)
	// promptly bounds how long a change may take to reach the other
	// server: far below the periodic reload it must not depend on.
	const promptly = 10 * time.Second
	if promptly >= autoscale.DefaultRefreshInterval {
		t.Fatalf("promptly = %v must be below the %v periodic reload", promptly, autoscale.DefaultRefreshInterval)
	}
	// seenByB waits until B's router reflects the change, then asks B's
	// controller once. The router reloads a second after a change (it is
	// debounced); the controller reloads as soon as the change arrives.
	// Asking before the change arrived would make B call the hook, which
	// the final count of calls would show.
	seenByB := func(host string, want error) {
		t.Helper()
		start := time.Now()
		poll(t, promptly, func() (bool, string) {
			return !b.gw.ArmedForTest(host, ""), "server B's router still arms " + host
		})
		if err := b.gw.ColdStartForTest(ctx, org.ID, host, ""); !errors.Is(err, want) {
			t.Fatalf("server B's cold start of %s = %v, want %v", host, errString(err), want)
		}
		t.Logf("%s: change on A seen by B within %v", host, time.Since(start).Round(time.Millisecond))
	}

	// The breaker on A: its fifth failure in a row disarms the record.
	if err := a.gw.ColdStartForTest(ctx, org.ID, "app.test", ""); err != nil {
		t.Fatalf("server A's cold start = %v, want a call", err)
	}
	poll(t, promptly, func() (bool, string) {
		r, err := dbA.ScalingRecord(ctx, org.ID, app.ID)
		return err == nil && r.Disarmed, "want the record disarmed by A's breaker"
	})
	seenByB("app.test", autoscale.ErrDisarmed)

	// The operator's disarm through A's API.
	api := declare("api.test")
	poll(t, promptly, func() (bool, string) {
		return b.gw.ArmedForTest("api.test", ""), "server B's router does not arm api.test yet"
	})
	visitor := newVisitor(t, a)
	if status, body := adminCall(t, visitor, a, "DELETE", "/scaling/"+api.ID, nil); status != http.StatusNoContent {
		t.Fatalf("DELETE /scaling/%s on A = %d %s, want 204", api.ID, status, body)
	}
	seenByB("api.test", autoscale.ErrNoRecord)

	if n := hookCalls.Load(); n != 1 {
		t.Errorf("hook calls = %d, want 1: A's failing call, and none from B", n)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
