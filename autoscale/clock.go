package autoscale

import (
	"context"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Two clocks meet in the controller (docs/autoscaling.md, "One clock"):
//
//   - this server's (Config.Now), which times what only it decides: its
//     sampling windows, its queue and its timers;
//   - the store's (Store.Clock), by which every time shared with the other
//     servers is decided and stored: leases, the call state (LastCallAt,
//     NextCallAt, PenaltyUntil), and the calls-per-minute budget.
//
// Records keep the store's times as the store holds them. The controller
// measures the offset between the two clocks at every reload and every
// lease it takes, and converts a stored time to its own clock
// (localLocked) before comparing it with its own, and its own "now" to the
// store's (storeTimeLocked) before comparing it with a stored time. A
// server whose clock is a minute off therefore still waits out exactly
// the cooldown another server started, and joins its cold start for
// exactly cold_start.

// now is this server's clock.
func (c *Controller) now() time.Time { return nowOf(c.cfg) }

// nowOf reads cfg's clock: Config.Now, or time.Now.
func nowOf(cfg Config) time.Time {
	if cfg.Now != nil {
		return cfg.Now()
	}
	return time.Now()
}

// setOffsetLocked takes storeNow, the store's clock read between this
// server's before and after, as the offset between the two clocks.
func (c *Controller) setOffsetLocked(storeNow, before, after time.Time) {
	mid := before.Add(after.Sub(before) / 2)
	c.offset = storeNow.Sub(mid)
}

// localLocked is t, a time of the store's clock, on this server's; zero
// stays zero.
func (c *Controller) localLocked(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(-c.offset)
}

// localPlanLocked is p, planned on the store's clock, on this server's.
func (c *Controller) localPlanLocked(p leasePlan) leasePlan {
	p.wait = c.localLocked(p.wait)
	p.acceptedAt = c.localLocked(p.acceptedAt)
	p.nextAllowed = c.localLocked(p.nextAllowed)
	return p
}

// measureClock reads the store's clock and takes the offset. A store
// that cannot be read leaves the offset as it was.
func (c *Controller) measureClock(ctx context.Context) {
	before := c.now()
	t, err := c.store.Clock(ctx)
	after := c.now()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("store clock not read", logkey.Err, err)
		}
		return
	}
	// Not taken when ctx ended: the controller is stopping.
	_ = c.do(ctx, func() { c.setOffsetLocked(t, before, after) })
}

// storeTimeLocked is local, a time of this server's clock, on the
// store's; zero stays zero.
func (c *Controller) storeTimeLocked(local time.Time) time.Time {
	if local.IsZero() {
		return local
	}
	return local.Add(c.offset)
}
