package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/aperio-dev/aperio/internal/recovery"
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
