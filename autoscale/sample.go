package autoscale

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// run is one unbroken stretch of samples on the same side of a threshold.
// It keeps the latest MaxRecordedSamples values, for the audit entry of the
// decision it may cause, in constant memory however long the window.
type run struct {
	since    time.Time // the first sample; zero when the run is empty
	n        int
	min, max float64
	ring     [MaxRecordedSamples]float64
}

// add extends the run with a sample u taken at now.
func (r *run) add(now time.Time, u float64) {
	if r.n == 0 {
		r.since, r.min, r.max = now, u, u
	}
	r.min, r.max = min(r.min, u), max(r.max, u)
	r.ring[r.n%MaxRecordedSamples] = u
	r.n++
}

// reset breaks the run.
func (r *run) reset() { r.n, r.since = 0, time.Time{} }

// lasted reports whether the run has covered at least d by now: its first
// and latest samples are d or more apart, with none breaking it between. A
// single sample covers nothing, so one spike never qualifies.
func (r *run) lasted(now time.Time, d time.Duration) bool {
	return r.n > 0 && now.Sub(r.since) >= d
}

// samples returns what the run recorded.
func (r *run) samples() samples {
	k := min(r.n, MaxRecordedSamples)
	s := samples{n: r.n, min: r.min, max: r.max, recent: make([]float64, 0, k)}
	for i := r.n - k; i < r.n; i++ {
		s.recent = append(s.recent, r.ring[i%MaxRecordedSamples])
	}
	return s
}

// samples are the utilization samples that caused a decision.
type samples struct {
	n        int       // how many there were
	min, max float64   // over all n
	recent   []float64 // the latest, oldest first, at most MaxRecordedSamples
}

// decision is one call the controller means to make. Its key is reused by
// a retry of the same decision (same reason, current and desired after a
// failure) and is new otherwise.
type decision struct {
	reason           Reason
	current, desired int
	key              string
	samples          samples
}

// decisionLocked makes a decision for b, reusing the key of the last
// failed decision when this one is its retry.
func (b *bind) decisionLocked(reason Reason, current, desired int, s samples) decision {
	d := decision{reason: reason, current: current, desired: desired, samples: s}
	b.rekeyLocked(&d)
	return d
}

// rekeyLocked sets d's key for its reason, current and desired.
func (b *bind) rekeyLocked(d *decision) {
	if r := b.retry; r != nil && r.reason == d.reason && r.current == d.current && r.desired == d.desired {
		d.key = r.key
		return
	}
	d.key = rand.Text()
}

// coldStartDesired is a cold start's desired capacity: one instance, or min
// when it is higher, and never above max. Normalize keeps min within max
// and gives a block without max the ceiling DefaultMax(min), so the cap
// only matters for a record that breaks that rule.
func coldStartDesired(r *Record) int {
	return min(max(1, r.Min), r.Max)
}

// scaleOutDesired is a scale-out's desired capacity from current
// instances, and false when there is nothing to ask: the server never asks
// above max (a record the controller holds always has one, see
// withDefaultMax).
func scaleOutDesired(current int, r *Record) (int, bool) {
	if r.Max <= 0 || current < 1 || current >= r.Max {
		return 0, false
	}
	return current + 1, true
}

// scaleInDesired is a scale-in's desired capacity from current instances:
// one below current, never below min or one, and never above max (a pool
// already above its max is asked straight down to it). It is false when
// there is nothing to give back: at min, at one instance, or without a
// max (never the case of a record the controller holds).
func scaleInDesired(current int, r *Record) (int, bool) {
	if r.Max <= 0 || current <= 1 || current <= r.Min {
		return 0, false
	}
	return min(max(current-1, r.Min, 1), r.Max), true
}

// sampleLoop samples every armed record's pool each SampleInterval.
func (c *Controller) sampleLoop(ctx context.Context) {
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	var bs []*bind
	var stats []PoolStats
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bs, stats = c.sample(ctx, bs[:0], stats[:0])
	}
}

// sample takes one sample of every armed record with a scaling range and
// makes the decisions that are due. The slices are reused across calls.
func (c *Controller) sample(ctx context.Context, bs []*bind, stats []PoolStats) ([]*bind, []PoolStats) {
	if c.do(ctx, func() { bs = c.sampledLocked(bs) }) != nil {
		return bs, stats
	}
	// The pool is read off the owner: the router may call ColdStart
	// while holding its own lock, and waits for the owner.
	for _, b := range bs {
		stats = append(stats, c.pool.Pool(b.key.org, b.key.host, b.key.path))
	}
	now := c.now()
	// Not taken when ctx ended: the controller is stopping.
	_ = c.do(ctx, func() {
		for i, b := range bs {
			c.observeLocked(b, stats[i], now)
		}
	})
	return bs, stats
}

// sampledLocked appends to bs the binds to sample now.
func (c *Controller) sampledLocked(bs []*bind) []*bind {
	for _, b := range c.binds {
		if b.rec != nil && !b.rec.Disarmed && b.rec.Max > 0 {
			bs = append(bs, b)
		} else {
			b.busy.reset()
			b.idle.reset()
			if awaitsInstance(b.start) {
				bs = append(bs, b)
			}
		}
	}
	return bs
}

// sampleIn is what planSample reads: one bind's sampling state, its new
// pool figures and the time they were taken.
type sampleIn struct {
	// rec is the bind's record; nil when there is none.
	rec *Record
	// busy and idle are the bind's stretches before the sample.
	busy, idle run
	// pending is set while a decision of the bind is queued or its call is
	// in flight: the stretches grow, but no decision is made.
	pending bool
	// nextAllowed ends the cooldown or backoff: no decision before it.
	nextAllowed time.Time
	stats       PoolStats
	now         time.Time
}

// samplePlan is what a sample does to a bind.
type samplePlan struct {
	// busy and idle are the stretches with the sample added.
	busy, idle run
	// call is the scale-out or scale-in to queue; nil when none is due.
	// Once it is queued, both stretches start afresh.
	call *sampledCall
	// hold, when set, says why a stretch that lasted long enough makes no
	// call (the cooldown or backoff runs, or the pool is at max): a
	// decision worth recording (the why constants of history.go).
	// holdBusy says the busy stretch lasted, else the idle one.
	hold     string
	holdBusy bool
}

// sampledCall is a decision a sample made, before it has a key.
type sampledCall struct {
	reason           Reason
	current, desired int
	samples          samples
}

// planSample adds in's sample to the bind's stretches and says whether a
// scale-out or scale-in is due. It reads no clock and changes nothing.
//
// Scale out: every sample at or above target for a whole window. Scale in:
// every sample below half the target for IdleWindows windows. A sample in
// between breaks both stretches: that gap is the hysteresis that keeps a
// pool hovering at its target from scaling out and in on alternate
// samples. The stretches keep growing during a cooldown, so a pool still
// saturated when it ends is scaled out again at once. A record that is
// missing, disarmed or without a scaling range (max 0) leaves the
// stretches as they were; a pool without measurable utilization (capacity
// 0) breaks both. A stretch long enough whose call the cooldown or backoff
// holds back, or that would scale out a pool already at max, makes no call
// but a hold: a decision the history records.
func planSample(in sampleIn) samplePlan {
	p := samplePlan{busy: in.busy, idle: in.idle}
	r, st := in.rec, in.stats
	if r == nil || r.Disarmed || r.Max <= 0 {
		return p
	}
	if st.Capacity <= 0 {
		p.busy.reset()
		p.idle.reset()
		return p
	}
	u := float64(st.Inflight) / float64(st.Capacity)
	if u >= r.TargetUtilization {
		p.busy.add(in.now, u)
	} else {
		p.busy.reset()
	}
	if u < r.TargetUtilization/2 {
		p.idle.add(in.now, u)
	} else {
		p.idle.reset()
	}
	var reason Reason
	var want int
	switch {
	case p.busy.lasted(in.now, r.Window):
		var ok bool
		if want, ok = scaleOutDesired(st.Instances, r); ok {
			reason = ReasonScaleOut
		} else if st.Instances >= r.Max {
			p.hold, p.holdBusy = whyOutAtMax, true
		}
	case p.idle.lasted(in.now, IdleWindows*r.Window):
		var ok bool
		if want, ok = scaleInDesired(st.Instances, r); ok {
			reason = ReasonScaleIn
		}
	}
	switch {
	case reason == "" || in.pending:
		// A pending decision is recorded already: nothing to add.
	case in.now.Before(in.nextAllowed):
		p.hold, p.holdBusy = holdReason(reason, r.ConsecutiveFailures > 0), reason == ReasonScaleOut
	case reason == ReasonScaleOut:
		p.call = &sampledCall{reason, st.Instances, want, p.busy.samples()}
	default:
		p.call = &sampledCall{reason, st.Instances, want, p.idle.samples()}
	}
	return p
}

// holdReason says why a decision for reason waits: the cooldown, or the
// backoff after failed calls.
func holdReason(reason Reason, failing bool) string {
	switch {
	case reason == ReasonScaleOut && failing:
		return whyOutBackoff
	case reason == ReasonScaleOut:
		return whyOutCooldown
	case failing:
		return whyInBackoff
	}
	return whyInCooldown
}

// awaitsInstance reports whether s is a cold start the provider accepted
// whose instance has not been seen yet: its pool is sampled, so that an
// instance that comes and dies does not leave later requests joining it.
// Run on the controller's owner goroutine.
func awaitsInstance(s *Start) bool {
	return s != nil && s.resolved && s.err == nil && !s.served
}

// observeLocked adds the sample st of b, taken at now (planSample), and
// queues the scale-out or scale-in it makes due. A queued decision starts
// both stretches afresh; one the full queue refused leaves them, so the
// next sample tries again.
func (c *Controller) observeLocked(b *bind, st PoolStats, now time.Time) {
	if st.Routable > 0 {
		b.routableAt = now
		if awaitsInstance(b.start) {
			b.start.served = true
		}
	}
	c.pointLocked(b, st, now)
	p := planSample(sampleIn{
		rec: b.rec, busy: b.busy, idle: b.idle,
		pending:     b.queued != nil || b.running != nil,
		nextAllowed: b.nextAllowed,
		stats:       st, now: now,
	})
	b.busy, b.idle = p.busy, p.idle
	if p.hold != "" {
		src := &b.idle
		if p.holdBusy {
			src = &b.busy
		}
		c.repeatLocked(b, now, apitype.ScalingActionNone, p.hold, apitype.ScalingOutcomeHeld, st.Instances, st.Instances, src)
	}
	if p.call == nil {
		return
	}
	d := b.decisionLocked(p.call.reason, p.call.current, p.call.desired, p.call.samples)
	if c.enqueueLocked(b, d, nil) != nil {
		src := &b.idle
		if p.call.reason == ReasonScaleOut {
			src = &b.busy
		}
		c.repeatLocked(b, now, string(d.reason), whyOf(d.reason), apitype.ScalingOutcomeRefused, d.current, d.desired, src)
		return
	}
	s := d.samples
	b.queued.note = c.noteLocked(b, now, string(d.reason), whyOf(d.reason), apitype.ScalingOutcomePending, d.current, d.desired,
		func(h *histDecision) { h.setSamples(s.n, s.recent) })
	b.busy.reset()
	b.idle.reset()
}

// whyOf is why a decision for reason is made, in words.
func whyOf(reason Reason) string {
	switch reason {
	case ReasonScaleOut:
		return whyScaleOut
	case ReasonScaleIn:
		return whyScaleIn
	}
	return whyColdStart
}
