package server

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestArmerExpiryTimer: the timer fires at the nearest armer expiry, due
// hands over exactly the tokens expired by then, and a reload with no
// expiring armer stops the timer.
func TestArmerExpiryTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newArmerExpiry()
		start := time.Now()
		e.set(map[string]time.Time{
			"tok_b": start.Add(2 * time.Hour),
			"tok_a": start.Add(time.Hour),
			"tok_c": start.Add(time.Hour),
		})
		select {
		case <-e.changed:
		default:
			t.Fatal("set did not signal changed")
		}
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		e.resetTimer(timer)

		if got := e.due(time.Now()); len(got) != 0 {
			t.Errorf("due(now) = %v, want none before any expiry", got)
		}
		<-timer.C
		if waited := time.Since(start); waited != time.Hour {
			t.Errorf("timer fired after %v, want 1h (the nearest expiry)", waited)
		}
		if got := e.due(time.Now()); !slices.Equal(got, []string{"tok_a", "tok_c"}) {
			t.Errorf("due(1h) = %v, want [tok_a tok_c]", got)
		}
		if got := e.due(time.Now()); len(got) != 0 {
			t.Errorf("due(1h) again = %v, want none: handed over once", got)
		}
		e.resetTimer(timer)
		<-timer.C
		if waited := time.Since(start); waited != 2*time.Hour {
			t.Errorf("second fire after %v, want 2h", waited)
		}
		if got := e.due(time.Now()); !slices.Equal(got, []string{"tok_b"}) {
			t.Errorf("due(2h) = %v, want [tok_b]", got)
		}

		// Already expired when loaded (a server that was down at the
		// time): the timer fires at once.
		e.set(map[string]time.Time{"tok_d": time.Now().Add(-time.Minute)})
		e.resetTimer(timer)
		before := time.Now()
		<-timer.C
		if d := time.Since(before); d != 0 {
			t.Errorf("timer for a past expiry fired after %v, want at once", d)
		}

		e.set(map[string]time.Time{"tok_e": time.Now().Add(time.Hour)})
		e.resetTimer(timer)
		e.set(map[string]time.Time{}) // released before it expired
		e.resetTimer(timer)
		later := time.NewTimer(48 * time.Hour)
		defer later.Stop()
		select {
		case <-timer.C:
			t.Error("timer fired with no expiring armer")
		case <-later.C:
		}
		if _, ok := e.next(); ok {
			t.Error("next() ok with no expiring armer")
		}
	})
}
