package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/config"
	"github.com/aperio-dev/aperio/gateway"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// startServerOn serves cfg with db as its store (closed by the caller's
// cleanup, after the server stops).
func startServerOn(t testing.TB, cfg config.Server, db *store.DB) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(context.Background(), cfg, gateway.Options{Logger: testLogger(), Store: db})
	if err != nil {
		ln.Close()
		t.Fatalf("gateway.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	s := &testServer{gw: gw, addr: ln.Addr().String(), url: "http://" + ln.Addr().String()}
	s.stop = sync.OnceValue(func() error {
		cancel()
		return wait(t, done, cfg.ShutdownTimeout+20*time.Second, "Serve returning")
	})
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
	})
	return s
}

// TestDisarmSeenByEveryServer runs two servers on one PostgreSQL database:
// a record disarmed on one (the breaker's write, then the API's delete)
// reaches the other server's controller through the change feed, well
// before its 30 s periodic reload.
func TestDisarmSeenByEveryServer(t *testing.T) {
	dsn := storetest.PostgresDSN(t) // skips, naming the variable, without PostgreSQL
	hook := startBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	ctx := t.Context()
	dbA, err := store.Open(ctx, store.Config{DatabaseURL: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dbA.Close(); err != nil {
			t.Errorf("store Close() = %v", err)
		}
	})
	cfg := serverConfig(t)
	cfg.DatabaseURL = dsn
	cfg.Scaling, cfg.ScalingAllowHTTP, cfg.ScalingAllowPrivate = true, true, true
	a := startServerOn(t, cfg, dbA)
	b := startServer(t, cfg, nil, nil)

	org, err := dbA.EnsureOrg(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	// promptly bounds how long a change may take to reach the other
	// server: far below the periodic reload it must not depend on.
	const promptly = 10 * time.Second
	if promptly >= autoscale.DefaultRefreshInterval {
		t.Fatalf("promptly = %v must be below the %v periodic reload", promptly, autoscale.DefaultRefreshInterval)
	}
	declare := func(host string) store.ScalingRecord {
		t.Helper()
		rec, _, err := dbA.DeclareScaling(ctx, store.ScalingRecord{OrgID: org.ID, Hostname: host, URL: hook.URL,
			Max: 1, ColdStart: time.Minute, Window: time.Second, Cooldown: time.Minute, TargetUtilization: 0.8}, "master", true)
		if err != nil {
			t.Fatalf("DeclareScaling(%s) = %v", host, err)
		}
		// B learns of the new record through the feed; its cold start
		// then calls the hook, which accepts. Wait for that call to be
		// stored, so that it cannot overwrite what the test does next.
		poll(t, promptly, func() (bool, string) {
			err := b.gw.ColdStartForTest(ctx, org.ID, host, "")
			return err == nil, "server B's cold start of " + host + ": " + errString(err)
		})
		poll(t, promptly, func() (bool, string) {
			r, err := dbA.ScalingRecord(ctx, org.ID, rec.ID)
			return err == nil && r.LastStatus == http.StatusAccepted, "want B's accepted call recorded"
		})
		return rec
	}

	// The breaker's write on server A: what its controller stores when a
	// fifth call fails.
	app := declare("app.test")
	if _, err := dbA.RecordScalingCall(ctx, app.ID, time.Now(), "cold_start", 500, autoscale.MaxFailures, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	poll(t, promptly, func() (bool, string) {
		err := b.gw.ColdStartForTest(ctx, org.ID, "app.test", "")
		return errors.Is(err, autoscale.ErrDisarmed), "server B's cold start after the disarm on A: " + errString(err) + ", want ErrDisarmed"
	})
	t.Logf("breaker disarm on A seen by B's controller after %v", time.Since(start).Round(time.Millisecond))

	// The operator's disarm through A's API.
	api := declare("api.test")
	visitor := newVisitor(t, a)
	if status, body := adminCall(t, visitor, a, "DELETE", "/scaling/"+api.ID, nil); status != http.StatusNoContent {
		t.Fatalf("DELETE /scaling/%s on A = %d %s, want 204", api.ID, status, body)
	}
	start = time.Now()
	poll(t, promptly, func() (bool, string) {
		err := b.gw.ColdStartForTest(ctx, org.ID, "api.test", "")
		return errors.Is(err, autoscale.ErrNoRecord), "server B's cold start after the delete on A: " + errString(err) + ", want ErrNoRecord"
	})
	t.Logf("API disarm on A seen by B's controller after %v", time.Since(start).Round(time.Millisecond))
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
