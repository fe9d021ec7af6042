package autoscale

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// scriptedDeclare runs declarer jobs one release at a time and records the
// order they ran in and the most that ever ran at once.
type scriptedDeclare struct {
	release chan struct{} // one receive lets one job finish

	mu        sync.Mutex // guards the following fields
	ran       []string   // job sessions, in the order they started
	inFlight  int
	maxAtOnce int
}

func (s *scriptedDeclare) declare(_ context.Context, job *declareJob) []string {
	s.mu.Lock()
	s.ran = append(s.ran, job.session)
	s.inFlight++
	s.maxAtOnce = max(s.maxAtOnce, s.inFlight)
	s.mu.Unlock()
	<-s.release
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return []string{"declared " + job.session}
}

func (s *scriptedDeclare) order() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ran), s.maxAtOnce
}

// TestDeclarerCoalesces: while a job runs, newer announcements replace the
// one waiting, so the store sees the job in flight and then only the
// latest, one at a time and in order; the waiters of a replaced job are
// released by the job that replaced it, and close runs what is queued.
func TestDeclarerCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scriptedDeclare{release: make(chan struct{})}
		d := &declarer{ctx: t.Context(), declare: s.declare}
		doneA := d.submit(&declareJob{session: "a"})
		synctest.Wait() // a is running
		doneB := d.submit(&declareJob{session: "b"})
		doneC := d.submit(&declareJob{session: "c"})
		if doneB != doneC {
			t.Errorf("submit(c) while b waits returned a new channel, want b's: c replaces b")
		}
		s.release <- struct{}{} // a finishes
		<-doneA
		if got := d.lastNotices(); !slices.Equal(got, []string{"declared a"}) {
			t.Errorf("lastNotices() after a = %q, want [declared a]", got)
		}
		synctest.Wait() // c is running
		select {
		case <-doneC:
			t.Fatalf("c's channel closed before c ran")
		default:
		}
		doneD := d.submit(&declareJob{session: "d"})
		closed := make(chan struct{})
		go func() {
			d.close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatalf("close returned while c was running and d queued")
		default:
		}
		s.release <- struct{}{} // c finishes
		<-doneC
		s.release <- struct{}{} // d finishes
		<-doneD
		<-closed
		if got, most := s.order(); !slices.Equal(got, []string{"a", "c", "d"}) || most != 1 {
			t.Errorf("jobs ran %q with at most %d at once, want [a c d] one at a time", got, most)
		}
		if got := d.lastNotices(); !slices.Equal(got, []string{"declared d"}) {
			t.Errorf("lastNotices() after d = %q, want [declared d]", got)
		}
		select {
		case <-d.submit(&declareJob{session: "e"}):
		default:
			t.Errorf("submit after close returned an open channel, want a closed one")
		}
		if got, _ := s.order(); len(got) != 3 {
			t.Errorf("jobs ran %q, want e dropped after close", got)
		}
	})
}

// TestDeclarerSurvivesPanic: a job that panics is recovered and counted,
// its waiters are released, and the session's next job still runs.
func TestDeclarerSurvivesPanic(t *testing.T) {
	t.Parallel()
	recovery.AllowForTest(t)
	before := recovery.Total()
	d := &declarer{ctx: t.Context(), log: slog.New(slog.DiscardHandler), declare: func(_ context.Context, job *declareJob) []string {
		if job.session == "bad" {
			panic("declare bug")
		}
		return []string{"declared " + job.session}
	}}
	<-d.submit(&declareJob{session: "bad"})
	<-d.submit(&declareJob{session: "good"})
	d.close()
	if got := d.lastNotices(); !slices.Equal(got, []string{"declared good"}) {
		t.Errorf("lastNotices() after a panic and a good job = %q, want [declared good]", got)
	}
	if got := recovery.Total() - before; got != 1 {
		t.Errorf("recovered panics = %d, want 1", got)
	}
}

// gatedAuditor is an events.Auditor whose AppendAudit waits until open is
// closed, as a store whose write lock another process holds. It is safe
// for concurrent use.
type gatedAuditor struct {
	open chan struct{}

	mu  sync.Mutex // guards got
	got []store.AuditEntry
}

func (a *gatedAuditor) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	select {
	case <-a.open:
	case <-ctx.Done():
		return store.AuditEntry{}, ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, e)
	return e, nil
}

func (a *gatedAuditor) entries() []store.AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// TestDeclareRefusalDoesNotWaitForAudit: declare, which the heartbeat's
// ack waits for, queues a refusal's audit entry instead of writing it, so
// it returns its notices while every store write blocks; once the store
// is released the entries are written, one per bind and reason however
// often the announcement repeats them.
func TestDeclareRefusalDoesNotWaitForAudit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		audit := &gatedAuditor{open: make(chan struct{})}
		em := events.New(events.Config{Audit: audit, AuditTimeout: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan error, 1)
		go func() { ran <- em.Run(ctx) }()
		r := newTestSessions(t, newHarness(t, nil).c, fakeArmed{}, em)
		// Binds the router refused for the session: refused without the
		// controller, so the audit entry is the job's only store write.
		job := &declareJob{id: tunnel.Identity{OrgID: "org-1", TokenID: "tok-1"}, session: "s-1", armer: "tok-1",
			binds: []declareBind{{hostname: "x.test"}, {hostname: "y.test", path: "/api"}}}
		declared := make(chan []string, 2)
		go func() {
			declared <- r.declare(ctx, job)
			declared <- r.declare(ctx, job) // a heartbeat repeating the announcement
		}()
		synctest.Wait()
		if got := len(declared); got != 2 {
			t.Errorf("declare returned %d times of 2 with the store blocked, want both: it waits for the audit write", got)
		}
		if got := audit.entries(); len(got) != 0 {
			t.Errorf("audit entries with the store blocked = %v, want none yet", got)
		}
		close(audit.open)
		notices := <-declared
		want := []string{
			"scaling declaration for x.test refused: " + errNotBound.Error(),
			"scaling declaration for y.test refused: " + errNotBound.Error(),
		}
		if !slices.Equal(notices, want) {
			t.Errorf("declare() notices = %q, want %q", notices, want)
		}
		<-declared
		synctest.Wait()
		got := audit.entries()
		if len(got) != 2 {
			t.Fatalf("audit entries once the store is released = %v, want 2: one per bind and reason", got)
		}
		for i, w := range []struct{ host, detail string }{
			{"x.test", "scaling declaration refused: " + errNotBound.Error()},
			{"y.test", "scaling declaration for path /api refused: " + errNotBound.Error()},
		} {
			e := got[i]
			if e.Event != eventScalingRefused || e.OrgID != "org-1" || e.Actor != store.ClientActor("tok-1") || e.Hostname != w.host || e.Detail != w.detail {
				t.Errorf("audit entry %d = %+v, want %s of org-1 by %s for %s, %q", i, e, eventScalingRefused, store.ClientActor("tok-1"), w.host, w.detail)
			}
		}
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
}
