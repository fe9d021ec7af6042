package router

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// pause blocks for d of the bubble's fake time.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

func TestVisitorClock(t *testing.T) {
	t.Run("no progress for the idle timeout ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			expired := make(chan struct{})
			c := newClock(t, time.Second, 0, func() { close(expired) })
			start := c.begin()
			<-expired // the visitor never reads: the timer expires the deadline
			if err := c.end(start, 0); !errors.Is(err, errVisitorIdle) {
				t.Errorf("end() = %v, want errVisitorIdle", err)
			}
			if waited := time.Since(start); waited != time.Second {
				t.Errorf("expired after %v, want 1s", waited)
			}
		})
	})
	t.Run("too slow after the grace ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			expired := 0
			c := newClock(t, time.Second, 100, func() { expired++ })
			var err error
			calls := 0
			for err == nil && calls < 100 {
				calls++
				start := c.begin()
				pause(200 * time.Millisecond) // one byte every 200 ms: 5 B/s
				err = c.end(start, 1)
			}
			if !errors.Is(err, errVisitorSlow) || expired != 1 {
				t.Fatalf("end() = %v after %d calls, expired %d times; want errVisitorSlow, once", err, calls, expired)
			}
			if calls != 6 {
				t.Errorf("judged after %d calls, want 6 (the first past 1s of waiting)", calls)
			}
		})
	})
	t.Run("a quiet backend does not count", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newClock(t, time.Second, 100, func() { t.Error("deadline expired") })
			for range 5 {
				start := c.begin()
				pause(10 * time.Millisecond) // the visitor takes 4 KiB in 10 ms
				if err := c.end(start, 4096); err != nil {
					t.Fatalf("end() = %v, want nil", err)
				}
				pause(time.Minute) // the backend is silent; no call is waiting
			}
			c.stop()
		})
	})
	t.Run("zero settings turn pacing off", func(t *testing.T) {
		if new(visitorClock).init(0, 0, expireFunc(func() {})) {
			t.Error("init(0, 0) says pacing is on, want off")
		}
	})
}

// expireFunc makes a func an expirer.
type expireFunc func()

func (f expireFunc) expire() { f() }

// newClock returns a clock with the rules given, ended by expire.
func newClock(t *testing.T, idle time.Duration, minRate int64, expire func()) *visitorClock {
	t.Helper()
	c := new(visitorClock)
	if !c.init(idle, minRate, expireFunc(expire)) {
		t.Fatalf("init(%v, %d) says pacing is off", idle, minRate)
	}
	return c
}
