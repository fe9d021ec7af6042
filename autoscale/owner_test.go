package autoscale

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/recovery"
)

// TestOwnerSurvivesPanic: a request whose handler panics is answered
// errOwnerPanic, the panic is counted, and the owner goes on serving: a
// cold start made afterwards is decided and called.
func TestOwnerSurvivesPanic(t *testing.T) {
	recovery.AllowForTest(t)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		before := recovery.Total()
		if err := h.c.do(context.Background(), func() { panic("boom") }); !errors.Is(err, errOwnerPanic) {
			t.Fatalf("do(panicking handler) = %v, want errOwnerPanic", err)
		}
		if got := recovery.Total() - before; got != 1 {
			t.Errorf("recovered panics = %d, want 1", got)
		}
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart after a panic: %v", err)
		}
		synctest.Wait()
		select {
		case <-s.Done():
		default:
			t.Fatal("cold start after a panic not done")
		}
		if n := len(h.caller.made()); n != 1 {
			t.Errorf("%d calls after a panic, want 1", n)
		}
	})
}

// TestCallerPanicFailsTheCall: a Caller that panics is a failed call, not
// a dead worker: the flight fails, the failure is counted, the call slot
// is freed, and the next cold start after the backoff calls again.
func TestCallerPanicFailsTheCall(t *testing.T) {
	recovery.AllowForTest(t)
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, []Record{rec("app.example.com")})
		h.caller.answer = func(n int, _ HookCall) (int, time.Duration, error) {
			if n == 0 {
				panic("provider client bug")
			}
			return 200, 0, nil
		}
		s, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart: %v", err)
		}
		synctest.Wait()
		select {
		case <-s.Failed():
		default:
			t.Fatal("flight of a panicking call not failed")
		}
		if !errors.Is(s.Err(), errCallPanic) {
			t.Errorf("flight Err = %v, want errCallPanic", s.Err())
		}
		if m := h.c.Metrics(); m.Failures != 1 || m.InFlight != 0 {
			t.Errorf("Metrics = %+v, want 1 failure, 0 in flight", m)
		}
		advance(MaxBackoff)
		s, err = h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart after the backoff: %v", err)
		}
		synctest.Wait()
		select {
		case <-s.Done():
		default:
			t.Fatal("cold start after the backoff not done")
		}
		if s.Err() != nil || len(h.caller.made()) != 2 {
			t.Errorf("after the backoff: Err %v, %d calls; want nil, 2", s.Err(), len(h.caller.made()))
		}
	})
}

// TestOnDecisionPanicIsRecovered: a panicking Config.OnDecision loses
// the decision it was told of, not the process or the next decision.
func TestOnDecisionPanicIsRecovered(t *testing.T) {
	recovery.AllowForTest(t)
	synctest.Test(t, func(t *testing.T) {
		var told []apitype.ScalingDecision
		h := newHarness(t, []Record{rec("app.example.com")}, func(cfg *Config, _ *harness) {
			cfg.OnDecision = func(d apitype.ScalingDecision) {
				told = append(told, d)
				if len(told) == 1 {
					panic("subscriber bug")
				}
			}
		})
		before := recovery.Total()
		if _, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", ""); err != nil {
			t.Fatalf("ColdStart: %v", err)
		}
		synctest.Wait()
		if len(told) < 2 {
			t.Errorf("OnDecision told %d decisions, want the pending one and its outcome", len(told))
		}
		if got := recovery.Total() - before; got != 1 {
			t.Errorf("recovered panics = %d, want 1", got)
		}
	})
}

// TestCloseWithoutRun: a controller never Run is stopped by Close (its
// owner goroutine exits, or the bubble would not end), and every call
// after it answers at once: an error, or a zero answer.
func TestCloseWithoutRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		c, err := New(Config{Store: st, Pool: newFakePool(), Caller: &fakeCaller{}})
		if err != nil {
			t.Fatal(err)
		}
		a := SessionDeclaration{OrgID: testOrg, Hostname: "app.example.com", Session: "s1", Armer: "token:tok_1",
			Block: rec("app.example.com").Scaling}
		if err := c.Declare(context.Background(), a); err != nil {
			t.Fatalf("Declare before Run: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if err := c.Declare(context.Background(), a); !errors.Is(err, ErrClosed) {
			t.Errorf("Declare after Close = %v, want ErrClosed", err)
		}
		if _, err := c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrClosed) {
			t.Errorf("ColdStart after Close = %v, want ErrClosed", err)
		}
		if p := c.PlanColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(p.Err, ErrClosed) {
			t.Errorf("PlanColdStart after Close = %+v, want ErrClosed", p)
		}
		c.Leave("s1")
		if h := c.History("scl_1"); len(h.Decisions) != 0 {
			t.Errorf("History after Close = %+v, want empty", h)
		}
		if m := c.Metrics(); m != (Metrics{}) {
			t.Errorf("Metrics after Close = %+v, want zero", m)
		}
		if err := c.Run(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Run after Close = %v, want ErrClosed", err)
		}
	})
}

// TestCloseStopsRun: Close ends a Run in progress, as its ctx's end does,
// and returns once it has.
func TestCloseStopsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Config{Store: newFakeStore(), Pool: newFakePool(), Caller: &fakeCaller{}})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- c.Run(context.Background()) }()
		synctest.Wait()
		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		synctest.Wait()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		default:
			t.Error("Close returned before Run")
		}
		if _, err := c.ColdStart(context.Background(), testOrg, "app.example.com", ""); !errors.Is(err, ErrClosed) {
			t.Errorf("ColdStart after Close = %v, want ErrClosed", err)
		}
	})
}
