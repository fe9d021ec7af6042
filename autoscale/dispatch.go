package autoscale

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/store"
)

// item is a decision waiting for, or holding, a call slot.
type item struct {
	b     *bind
	d     decision
	start *Start    // the cold start flight it serves; nil for a sampled decision
	seq   uint64    // queue order
	since time.Time // when it was queued
	// leaseUntil defers it while another server holds the record's lease
	// (until that lease expires, or its holder's outcome is seen), or its
	// recorded cooldown runs; leased is set in the first case.
	leaseUntil time.Time
	leased     bool
	// note numbers its decision in the bind's history (0: none).
	note uint64
	// releaseMark is the bind's releases when the lease attempt began.
	releaseMark uint64

	// Set when the call starts, from the record at that moment.
	call     HookCall
	host     string // provider host
	recordID string
	cooldown time.Duration
}

// enqueueLocked queues decision d for b (with its cold start flight s, or
// nil). A full queue refuses it loudly: counted, logged, and reported to
// the caller; a sampled decision is then made again on the next sample.
func (c *Controller) enqueueLocked(b *bind, d decision, s *Start) error {
	if len(c.queue) >= c.cfg.MaxQueued {
		c.rejectLocked(b, d.reason)
		return ErrQueueFull
	}
	c.seq++
	it := &item{b: b, d: d, start: s, seq: c.seq, since: c.now()}
	c.queue = append(c.queue, it)
	b.queued = it
	c.signal()
	return nil
}

// rejectLocked counts and logs a decision of b for reason that the full
// queue refused.
func (c *Controller) rejectLocked(b *bind, reason Reason) {
	c.metrics.QueueRejected++
	c.log.Warn("scaling decision refused: call queue full",
		logkey.OrgID, b.key.org, logkey.Hostname, b.key.host, logkey.Path, b.key.path,
		logkey.Reason, reason, logkey.Queued, len(c.queue))
}

// removeLocked takes it out of the queue.
func (c *Controller) removeLocked(it *item) {
	for i, x := range c.queue {
		if x == it {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			break
		}
	}
	if it.b.queued == it {
		it.b.queued = nil
	}
}

// dropLocked removes a queued decision without calling: its flight ends
// with err (nil: the pool no longer needs it). It is counted and logged,
// never silent.
func (c *Controller) dropLocked(it *item, err error, why string) {
	c.removeLocked(it)
	c.metrics.Dropped++
	c.endNoteLocked(it.b, it.note, c.now(), apitype.ScalingOutcomeDropped, 0, why, false)
	if it.start != nil {
		it.start.resolveAtLocked(err, c.now())
	}
	c.log.Info("scaling decision dropped",
		logkey.OrgID, it.b.key.org, logkey.Hostname, it.b.key.host, logkey.Path, it.b.key.path,
		logkey.Reason, it.d.reason, logkey.Why, why)
	c.gcLocked(it.b)
}

// hostState is the politeness owed to one provider host.
type hostState struct {
	strikes      int       // consecutive 429 answers
	penaltyUntil time.Time // no call before, because of the 429s
	retryUntil   time.Time // no call before, because of Retry-After
}

// until is when the host may be called again.
func (h *hostState) until() time.Time {
	if h.penaltyUntil.After(h.retryUntil) {
		return h.penaltyUntil
	}
	return h.retryUntil
}

// penalty is the wait after the nth consecutive 429 from a host:
// PenaltyBase doubling with each, at most MaxPenalty.
func penalty(strikes int) time.Duration {
	d := PenaltyBase
	for i := 1; i < strikes && d < MaxPenalty; i++ {
		d *= 2
	}
	return min(d, MaxPenalty)
}

// politeLocked records a host's answer: a 429 adds a penalty, any other
// answer clears it (a transport error, status 0, does neither), and a
// Retry-After, trusted up to MaxRetryAfter, pushes the next call back.
func (c *Controller) politeLocked(host string, status int, retryAfter time.Duration, now time.Time) {
	h := c.hosts[host]
	if h == nil {
		h = &hostState{}
		c.hosts[host] = h
	}
	switch {
	case status == 429:
		h.strikes++
		h.penaltyUntil = now.Add(penalty(h.strikes))
	case status != 0:
		h.strikes = 0
		h.penaltyUntil = time.Time{}
	}
	if retryAfter > 0 {
		if t := now.Add(min(retryAfter, MaxRetryAfter)); t.After(h.retryUntil) {
			h.retryUntil = t
		}
	}
	if h.strikes == 0 && !h.until().After(now) {
		delete(c.hosts, host)
	}
}

// hostUntilLocked is when host may be called again (zero: now).
func (c *Controller) hostUntilLocked(host string, now time.Time) time.Time {
	h := c.hosts[host]
	if h == nil {
		return time.Time{}
	}
	t := h.until()
	if h.strikes == 0 && !t.After(now) {
		delete(c.hosts, host)
	}
	return t
}

// bucket is the global start budget (scaling_max_calls_per_minute): a
// token bucket of capacity perMinute that starts with one token and
// refills perMinute/60 tokens a second. It counts in integer units of
// 1/time.Minute token, so refill is exact: perMinute units a nanosecond.
type bucket struct {
	perMinute int64
	units     int64
	last      time.Time
}

const unitsPerToken = int64(time.Minute)

// newBucket returns a bucket holding one token at now; perMinute below one
// means one.
func newBucket(perMinute int, now time.Time) bucket {
	return bucket{perMinute: int64(max(1, perMinute)), units: unitsPerToken, last: now}
}

func (b *bucket) refill(now time.Time) {
	el := now.Sub(b.last)
	if el <= 0 {
		return
	}
	b.last = now
	full := b.perMinute * unitsPerToken
	if el >= time.Minute {
		b.units = full
		return
	}
	b.units = min(full, b.units+int64(el)*b.perMinute)
}

// wait is how long until a token is there (0: one is).
func (b *bucket) wait(now time.Time) time.Duration {
	b.refill(now)
	if b.units >= unitsPerToken {
		return 0
	}
	need := unitsPerToken - b.units
	return time.Duration((need + b.perMinute - 1) / b.perMinute)
}

// take takes a token if one is there.
func (b *bucket) take(now time.Time) bool {
	b.refill(now)
	if b.units < unitsPerToken {
		return false
	}
	b.units -= unitsPerToken
	return true
}

// dispatchLoop starts calls as slots, cooldowns, politeness and the start
// budget allow.
func (c *Controller) dispatchLoop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		if wait := c.dispatch(ctx); wait > 0 {
			t.Reset(wait)
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-t.C:
		}
	}
}

// dispatch starts every call it can, oldest decision first, and returns
// how long until a deferred one may start (0: nothing to wait for; a call
// ending or a new decision wakes the loop).
//
// A decision is deferred while its bind is in cooldown or backoff or has a
// call in flight, or its provider host owes a penalty or a Retry-After;
// deferred decisions hold no slot and keep their place, and younger ones
// behind them may start. The start budget is checked last, right before a
// call starts, so deferred decisions spend no token.
func (c *Controller) dispatch(ctx context.Context) time.Duration {
	for {
		var (
			it   *item
			wait time.Duration
			stop bool
		)
		now := c.now()
		if c.do(ctx, func() {
			if c.inflight >= MaxInFlight {
				stop = true
				return
			}
			var next time.Time
			if it, next = c.pickLocked(now); it == nil {
				stop = true
				if !next.IsZero() {
					wait = next.Sub(now)
				}
				return
			}
			if w := c.bucket.wait(now); w > 0 {
				stop, wait = true, w
			}
		}) != nil {
			return 0 // stopping
		}
		if stop {
			return wait
		}

		// Re-evaluate against the pool as it is now, read off the owner.
		k := it.b.key
		st := c.pool.Pool(k.org, k.host, k.path)

		var start bool
		if c.do(ctx, func() {
			now := c.now()
			if it.b.queued != it || !c.eligibleLocked(it, now) {
				return
			}
			if !c.reevaluateLocked(it, st) || !c.bucket.take(now) {
				return
			}
			c.startLocked(it)
			start = true
		}) != nil {
			return 0 // stopping
		}
		if start {
			c.wg.Go(func() {
				defer recovery.Recover(c.log, "autoscale call")
				c.callHook(ctx, it)
			})
		}
	}
}

// pickLocked returns the oldest decision that may start now, or else the
// earliest time a deferred one may (zero when none is waiting on time).
func (c *Controller) pickLocked(now time.Time) (*item, time.Time) {
	var next time.Time
	for _, it := range c.queue {
		if it.b.running != nil || c.probingLocked(it.b.host) {
			continue // the call's end wakes the dispatcher
		}
		t := c.notBeforeLocked(it, now)
		if !now.Before(t) {
			return it, time.Time{}
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return nil, next
}

// notBeforeLocked is the earliest time it may start.
func (c *Controller) notBeforeLocked(it *item, now time.Time) time.Time {
	t := it.b.nextAllowed
	if h := c.hostUntilLocked(it.b.host, now); h.After(t) {
		t = h
	}
	if it.leaseUntil.After(t) {
		t = it.leaseUntil
	}
	return t
}

// probingLocked reports whether host owes a 429 penalty and already has a
// call in flight: once its penalty has passed, a penalized host gets one
// call at a time until it answers something other than 429, rather than
// every deferred decision at once.
func (c *Controller) probingLocked(host string) bool {
	h := c.hosts[host]
	return h != nil && h.strikes > 0 && c.hostCalls[host] > 0
}

// eligibleLocked reports whether it may start now.
func (c *Controller) eligibleLocked(it *item, now time.Time) bool {
	return c.inflight < MaxInFlight && it.b.running == nil && !c.probingLocked(it.b.host) &&
		!now.Before(c.notBeforeLocked(it, now))
}

// reevaluateLocked checks a queued decision against the record and the
// pool st as they are now (planRequeue), and drops it or brings it up to
// date. A new current or desired is a new decision, with a new key.
func (c *Controller) reevaluateLocked(it *item, st PoolStats) bool {
	p := planRequeue(it.d, it.b.rec, st)
	if p.drop {
		c.dropLocked(it, p.err, p.why)
		return false
	}
	if p.current != it.d.current || p.desired != it.d.desired {
		it.d.current, it.d.desired = p.current, p.desired
		it.b.rekeyLocked(&it.d)
		c.renoteLocked(it.b, it.note, p.current, p.desired)
	}
	return true
}

// requeuePlan is what becomes of a queued decision about to take a slot.
type requeuePlan struct {
	// drop is set when the decision is dropped: its cold start flight, if
	// any, ends with err (nil: the pool no longer needs it), and why is
	// logged.
	drop bool
	err  error
	why  string
	// current and desired are the decision's body from now on, when it is
	// kept.
	current, desired int
}

// planRequeue decides whether decision d, queued for a bind whose record
// is now r (nil when gone) and whose pool is now st, is still to be made,
// and with what body. It reads no clock and changes nothing.
//
// A decision for a record deleted or disarmed while it waited is dropped.
// A sampled decision is dropped if the pool's instances changed, or its
// utilization became unmeasurable, while it waited (the sampler decides
// afresh), or if min and max leave nothing to ask; a cold start is
// dropped, as a success, once the pool is routable.
func planRequeue(d decision, r *Record, st PoolStats) requeuePlan {
	switch {
	case r == nil:
		return requeuePlan{drop: true, err: ErrNoRecord, why: "record deleted"}
	case r.Disarmed:
		return requeuePlan{drop: true, err: ErrDisarmed, why: "record disarmed"}
	}
	var want int
	var ok bool
	switch d.reason {
	case ReasonColdStart:
		if st.Routable > 0 {
			return requeuePlan{drop: true, why: "pool became routable"}
		}
		want, ok = coldStartDesired(r), true
	case ReasonScaleOut:
		want, ok = scaleOutDesired(st.Instances, r)
	case ReasonScaleIn:
		want, ok = scaleInDesired(st.Instances, r)
	}
	if d.reason != ReasonColdStart && (st.Instances != d.current || st.Capacity <= 0) {
		return requeuePlan{drop: true, why: "pool changed while queued"}
	}
	if !ok {
		return requeuePlan{drop: true, why: "nothing to ask within min and max"}
	}
	return requeuePlan{current: st.Instances, desired: want}
}

// startLocked moves it from the queue to a call slot.
func (c *Controller) startLocked(it *item) {
	b, r := it.b, it.b.rec
	c.removeLocked(it)
	b.running = it
	c.inflight++
	it.host = b.host
	c.hostCalls[it.host]++
	it.recordID, it.cooldown = r.ID, r.Cooldown
	it.releaseMark = b.releases
	it.call = HookCall{
		URL:            r.URL,
		Secret:         r.Secret,
		IdempotencyKey: it.d.key,
		Body: HookBody{
			Reason: it.d.reason, Hostname: r.Hostname, Path: r.Path, OrgID: c.hookOrg(r.OrgID),
			Current: it.d.current, Desired: it.d.desired, Min: r.Min, Max: r.Max,
		},
	}
}

// endCallLocked frees the call slot of it.
func (c *Controller) endCallLocked(it *item) {
	c.inflight--
	it.b.running = nil
	if c.hostCalls[it.host]--; c.hostCalls[it.host] <= 0 {
		delete(c.hostCalls, it.host)
	}
}

// backoff is the wait after a call: cooldown after a success; after the
// nth consecutive failure cooldown × 2^n, at most MaxBackoff (but never
// less than the cooldown).
func backoff(cooldown time.Duration, failures int) time.Duration {
	d := cooldown
	for i := 0; i < failures && d < MaxBackoff; i++ {
		d *= 2
	}
	if failures > 0 {
		d = min(d, MaxBackoff)
	}
	return max(d, cooldown)
}

// outcome is what one call did, for the store, the audit log and events.
type outcome struct {
	at       time.Time
	rec      Record // the record after the call, breaker included
	d        decision
	status   int
	err      error
	disarmed bool // this call tripped the breaker
	persist  bool // the record still exists: write the outcome
	// next and penalty are the call state it leaves, on this server's
	// clock: no call for the record before next, none to its provider
	// before penalty.
	next, penalty time.Time
	// gen is the generation of the lease the call was made under; 0
	// without one.
	gen int64
}

// leaseTimeout bounds the store access that takes a call's lease.
const leaseTimeout = 5 * time.Second

// lease takes the record's lease for its decision (one call per decision
// across every server sharing the store) and reports whether the call is
// to be made. When another server holds the lease, or has called and its
// cooldown, backoff or penalty runs, no call is made: the call slot is
// freed and the decision waits or ends as planLease says. A store that
// cannot be reached does not stop the call: each server then decides
// alone, as a server without a shared store always does.
func (c *Controller) lease(ctx context.Context, it *item) bool {
	lctx, cancel := context.WithTimeout(ctx, leaseTimeout)
	before := c.now()
	held, rec, ok, err := c.store.AcquireScalingLease(lctx, store.ScalingLease{
		RecordID: it.recordID, Holder: c.cfg.Holder, Reason: string(it.d.reason),
		Current: it.d.current, Desired: it.d.desired, IdempotencyKey: it.d.key,
		CallsPerMinute: c.cfg.MaxCallsPerMinute,
	}, c.cfg.LeaseTTL())
	after := c.now()
	cancel()

	// Run waits for its workers before it stops the owner: this reply
	// always comes.
	var take bool
	if c.do(context.Background(), func() { take = c.leasedLocked(ctx, it, held, rec, ok, err, before, after) }) != nil {
		return false
	}
	return take
}

// leasedLocked applies the answer of lease's store call, which ran from
// before to after: it reports whether the call is to be made.
func (c *Controller) leasedLocked(ctx context.Context, it *item, held store.ScalingLease, rec Record, ok bool, err error, before, after time.Time) bool {
	switch {
	case err == nil && ok:
		// Taking over a dead holder's lease of the same decision keeps
		// the key the provider may have seen. The lease's generation goes
		// with the call, for the provider to refuse an older one.
		c.setOffsetLocked(held.AcquiredAt, before, after)
		it.d.key, it.call.IdempotencyKey = held.IdempotencyKey, held.IdempotencyKey
		it.call.Body.LeaseGeneration = held.Generation
		return true
	case ctx.Err() != nil:
		c.abandonLocked(it, ErrClosed)
		return false
	case errors.Is(err, store.ErrNotFound):
		c.abandonLocked(it, ErrNoRecord)
		if b := c.byID[it.recordID]; b != nil {
			c.setRecLocked(b, nil)
			c.landLocked(b)
			c.gcLocked(b)
		}
		return false
	case err != nil:
		c.log.Warn("scaling lease not taken: calling without it", logkey.RecordID, it.recordID, logkey.Err, err)
		return true
	}
	c.endCallLocked(it)
	b := it.b
	now := c.now()
	if held.Holder == "" && !held.RetryAt.IsZero() {
		// The calls-per-minute budget all servers share is spent: wait
		// for its next call, in place.
		if q := b.queued; q != nil {
			c.dropLocked(q, nil, "superseded by a decision waiting for the budget")
		}
		it.leaseUntil, it.leased = c.localLocked(held.RetryAt), false
		c.requeueLocked(it)
		c.signal()
		return false
	}
	p := c.localPlanLocked(planLease(leaseIn{reason: it.d.reason, rec: rec, held: held, since: c.storeTimeLocked(it.since), now: c.storeTimeLocked(now), routable: c.storeTimeLocked(b.routableAt)}))
	if b.rec != nil && b.rec.ID == rec.ID {
		// The store's call state is newer than the bind's: take it (the
		// breaker and the declaration wait for the next reload).
		b.rec.LastCallAt, b.rec.LastReason, b.rec.LastStatus, b.rec.LastError = rec.LastCallAt, rec.LastReason, rec.LastStatus, rec.LastError
		b.rec.NextCallAt, b.rec.PenaltyUntil = rec.NextCallAt, rec.PenaltyUntil
		c.honourLocked(b, &rec, now)
	}
	if p.nextAllowed.After(b.nextAllowed) {
		b.nextAllowed = p.nextAllowed
	}
	switch {
	case p.wait.IsZero():
		c.settleLocked(it, p)
	case c.closed:
		c.abandonLocked(it, ErrClosed)
	default:
		if q := b.queued; q != nil {
			// Only a sampled decision can have been queued while this
			// one ran (a cold start joins the running flight): this one
			// waits in its place.
			c.dropLocked(q, nil, "superseded by a decision waiting for the lease")
		}
		it.leaseUntil, it.leased = p.wait, !held.ExpiresAt.IsZero()
		if it.leased && b.releases != it.releaseMark {
			// The holder's release notice came while this attempt ran,
			// too early to wake it: the lease is over, try again now.
			it.leaseUntil = time.Time{}
		}
		c.requeueLocked(it)
		c.log.Debug("scaling call deferred", logkey.RecordID, it.recordID, logkey.Reason, it.d.reason)
	}
	c.signal()
	return false
}

// settleLocked ends decision it without a call of this server's, as p
// says: its flight ends with p.err (a success accepted at p.acceptedAt
// when nil). The decision is counted as dropped and logged.
func (c *Controller) settleLocked(it *item, p leasePlan) {
	b := it.b
	if b.queued == it {
		c.removeLocked(it)
	}
	if it.start != nil {
		it.start.resolveAtLocked(p.err, p.acceptedAt)
	}
	c.metrics.Dropped++
	c.endNoteLocked(b, it.note, c.now(), apitype.ScalingOutcomeDropped, 0, p.why, false)
	c.log.Info("scaling decision dropped",
		logkey.OrgID, b.key.org, logkey.Hostname, b.key.host, logkey.Path, b.key.path,
		logkey.Reason, it.d.reason, logkey.Why, p.why)
	c.gcLocked(b)
}

// abandonLocked frees the call slot of it, which makes no call: its
// flight ends with err.
func (c *Controller) abandonLocked(it *item, err error) {
	c.endCallLocked(it)
	c.endNoteLocked(it.b, it.note, c.now(), apitype.ScalingOutcomeDropped, 0, err.Error(), false)
	if it.start != nil {
		it.start.resolveAtLocked(err, c.now())
	}
	c.gcLocked(it.b)
}

// requeueLocked puts it back in the queue, in its place by age.
func (c *Controller) requeueLocked(it *item) {
	i, _ := slices.BinarySearchFunc(c.queue, it.seq, func(x *item, seq uint64) int { return cmp.Compare(x.seq, seq) })
	c.queue = slices.Insert(c.queue, i, it)
	it.b.queued = it
}

// leaseReleased is told that a call on record id was recorded, by any
// server: a decision deferred on that record's lease tries again now (it
// then finds the call's cooldown and joins it, or takes the lease), and
// the records are reloaded for the call state.
func (c *Controller) leaseReleased(ctx context.Context, id string) {
	if c.do(ctx, func() {
		if b := c.byID[id]; b != nil {
			b.releases++
			if b.queued != nil && !b.queued.leaseUntil.IsZero() {
				b.queued.leaseUntil = time.Time{}
				c.signal()
			}
		}
	}) != nil {
		return // stopping
	}
	c.signalReload()
}

// leaseIn is what planLease reads: a decision the store refused the lease
// for, and what the store said.
type leaseIn struct {
	reason Reason
	// rec is the record as the store holds it.
	rec Record
	// held is the lease of the server that holds it; zero when the
	// record's own state refused (disarmed, cooldown, backoff, penalty).
	held store.ScalingLease
	// since is when the decision was queued.
	since time.Time
	now   time.Time
	// routable is when this server last saw the pool routable (zero:
	// not since it started).
	routable time.Time
}

// leasePlan is what becomes of a decision refused its lease.
type leasePlan struct {
	// wait, when set, keeps the decision queued until then: another
	// server's call is in flight, or the cooldown of one ends.
	wait time.Time
	// Otherwise the decision is dropped: its flight ends with err (a
	// success accepted at acceptedAt when nil), and why is logged.
	err        error
	acceptedAt time.Time
	why        string
	// nextAllowed is when the bind may decide again.
	nextAllowed time.Time
}

// planLease decides what a decision whose lease the store refused does.
// It reads no clock and changes nothing.
//
// Another server's call answers the decision as if this server had made
// it. While that call is in flight (its lease live), a cold start waits
// for its outcome, at most until the lease expires, and then tries
// again: a holder that died is taken over once, with the same key. A
// sampled decision is dropped: the sampler decides afresh after the call.
// When the record's own state refused: a disarmed record ends the
// decision with ErrDisarmed; a cold start accepted less than cold_start
// ago, whose pool this server has not seen routable since, is joined (the
// instance is on its way); a failed call ends a cold
// start with that call's error, as its backoff would; any other cold
// start waits for the cooldown, backoff or penalty to end.
func planLease(in leaseIn) leasePlan {
	r := in.rec
	var next time.Time
	for _, t := range []*time.Time{r.NextCallAt, r.PenaltyUntil} {
		if t != nil && t.After(next) {
			next = *t
		}
	}
	if in.held.Holder != "" {
		if in.reason == ReasonColdStart {
			return leasePlan{wait: in.held.ExpiresAt, nextAllowed: next}
		}
		return leasePlan{why: "another server is calling", nextAllowed: later(next, in.held.ExpiresAt)}
	}
	switch {
	case r.Disarmed:
		return leasePlan{err: ErrDisarmed, why: "record disarmed", nextAllowed: next}
	case in.reason != ReasonColdStart:
		return leasePlan{why: "another server called", nextAllowed: next}
	}
	if at := acceptedColdStart(&r, in.now, in.routable); !at.IsZero() {
		return leasePlan{acceptedAt: at, why: "another server's cold start is under way", nextAllowed: next}
	}
	if r.LastCallAt != nil && (r.LastStatus < 200 || r.LastStatus > 299) {
		return leasePlan{err: recordedCallError(&r), why: "another server's call failed", nextAllowed: next}
	}
	return leasePlan{wait: later(next, in.now), nextAllowed: next}
}

// timeOrNil returns &t, or nil for a zero t.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// callHook makes one call, if it takes the lease, and records its outcome.
func (c *Controller) callHook(ctx context.Context, it *item) {
	if !c.lease(ctx, it) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	if it.start != nil && it.start.parent.IsValid() {
		// The call runs on the controller's context; a tracing Caller
		// places its span in the trace of the request that asked for it.
		cctx = trace.ContextWithSpanContext(cctx, it.start.parent)
	}
	status, retryAfter, err := c.safeCall(cctx, it.call)
	cancel()
	now := c.now()

	// Run waits for its workers before it stops the owner: these
	// replies always come.
	var o outcome
	stopped := false
	if c.do(context.Background(), func() {
		if ctx.Err() != nil {
			// Shutting down: the call's fate is unknown, so it counts
			// neither as a success nor as a failure.
			stopped = true
			c.endCallLocked(it)
			c.endNoteLocked(it.b, it.note, now, apitype.ScalingOutcomeDropped, 0, ErrClosed.Error(), false)
			if it.start != nil {
				it.start.resolveAtLocked(ErrClosed, c.now())
			}
			c.gcLocked(it.b)
			return
		}
		o = c.finishLocked(it, status, retryAfter, err, now)
	}) != nil || stopped {
		return
	}
	c.signal()
	// The write ends even when record panics (the worker's root recovers
	// it): a bind counted writing would ignore every reload.
	defer func() {
		_ = c.do(context.Background(), func() {
			it.b.writing--
			c.landLocked(it.b)
			c.gcLocked(it.b)
		})
	}()
	c.record(ctx, o)
}

// errCallPanic is the error of a hook call whose Caller panicked.
var errCallPanic = errors.New("autoscale: hook call panicked")

// safeCall is c.caller.Call, with a panic in the Caller recovered, logged
// and counted (internal/recovery) and taken as a failed call: the call's
// state on the owner (its slot, the bind's flight) still ends.
func (c *Controller) safeCall(ctx context.Context, call HookCall) (status int, retryAfter time.Duration, err error) {
	err = errCallPanic // kept only when Call panics: Recover returns normally
	defer recovery.Recover(c.log, "autoscale hook call")
	return c.caller.Call(ctx, call)
}

// finishLocked applies a call's answer: politeness, then what
// planOutcome decides for the breaker, the cooldown or backoff, and the
// cold start flight.
func (c *Controller) finishLocked(it *item, status int, retryAfter time.Duration, err error, now time.Time) outcome {
	b := it.b
	c.endCallLocked(it)
	c.politeLocked(it.host, status, retryAfter, now)
	p := planOutcome(outcomeIn{
		rec: b.rec, key: b.key, recordID: it.recordID, body: it.call.Body, d: it.d,
		cooldown: it.cooldown, status: status, err: err, now: now,
	})
	o := p.outcome
	o.next, o.penalty = p.nextAllowed, c.hostUntilLocked(it.host, now)
	o.gen = it.call.Body.LeaseGeneration
	if o.persist {
		// The record holds the store's times; the store stamps the call
		// with its own clock when it records it (record).
		at := c.storeTimeLocked(now)
		o.rec.LastCallAt = &at
		o.rec.NextCallAt, o.rec.PenaltyUntil, o.rec.LastError = timeOrNil(c.storeTimeLocked(o.next)), timeOrNil(c.storeTimeLocked(o.penalty)), ""
		if o.err != nil {
			o.rec.LastError = o.err.Error()
		}
	}
	c.metrics.Calls++
	if !p.ok {
		c.metrics.Failures++
	}
	if o.disarmed {
		c.metrics.Disarms++
	}
	// A record deleted (or deleted and declared again) while the call
	// ran has no history of it left: the note is then dropped.
	outcome, errText := apitype.ScalingOutcomeAccepted, ""
	if !p.ok {
		outcome, errText = apitype.ScalingOutcomeFailed, o.err.Error()
	}
	c.endNoteLocked(b, it.note, now, outcome, status, errText, o.disarmed)
	if o.persist {
		*b.rec = o.rec
	}
	b.lastCallEnd = now
	b.nextAllowed = p.nextAllowed
	b.retry = p.retry
	if it.start != nil {
		it.start.resolveAtLocked(errOrNil(p.ok, o.err), c.now())
	}
	if !p.ok {
		// A cold start queued behind this call would only wait out the
		// backoff: its visitors take the fallback chain now.
		if q := b.queued; q != nil && q.start != nil {
			c.dropLocked(q, o.err, "call failed")
		}
	}
	b.writing++
	return o
}

// outcomeIn is what planOutcome reads: the bind's record as it is now,
// the call as it was made, and its answer.
type outcomeIn struct {
	// rec is the bind's record now; nil when it is gone.
	rec *Record
	key bindKey
	// recordID, body, d and cooldown are the call's, set when it started.
	recordID string
	body     HookBody
	d        decision
	cooldown time.Duration
	// status and err are the answer, as Caller.Call returned them.
	status int
	err    error
	now    time.Time
}

// outcomePlan is what a call's answer does to its bind.
type outcomePlan struct {
	// outcome is what the store, the audit log and events receive; its
	// rec, when persist is set, is also the bind's record from now on.
	outcome
	// ok is set when the provider accepted the call (any 2xx).
	ok bool
	// nextAllowed ends the cooldown, or the backoff after a failure.
	nextAllowed time.Time
	// retry is the failed decision, whose retry reuses its key; nil after
	// a success.
	retry *decision
}

// planOutcome decides what a call's answer does. It reads no clock and
// changes nothing.
//
// Anything but a 2xx answer is a failure (a *CallError). A success clears
// the failure count; each failure adds one, and the MaxFailures-th in a
// row disarms the record. The next call waits for the cooldown after a
// success and for backoff(cooldown, failures) after a failure. A record
// deleted, or deleted and declared again, while the call was in flight
// keeps nothing: the outcome is audited against the call's own record ID
// and body.
func planOutcome(in outcomeIn) outcomePlan {
	ok := in.err == nil && in.status >= 200 && in.status <= 299
	err := in.err
	if !ok {
		err = &CallError{Status: in.status, Err: in.err}
	}
	p := outcomePlan{outcome: outcome{at: in.now, d: in.d, status: in.status, err: err}, ok: ok}
	failures := 0
	if r := in.rec; r != nil && r.ID == in.recordID {
		if !ok {
			failures = r.ConsecutiveFailures + 1
		}
		at := in.now
		next := *r
		p.disarmed = failures >= MaxFailures && !r.Disarmed
		next.ConsecutiveFailures = failures
		next.Disarmed = r.Disarmed || p.disarmed
		next.LastCallAt, next.LastReason, next.LastStatus = &at, string(in.d.reason), in.status
		p.rec, p.persist = next, true
	} else {
		if !ok {
			failures = 1
		}
		p.rec = Record{
			ID: in.recordID, OrgID: in.key.org, Hostname: in.key.host, Path: in.key.path,
			Scaling: Declaration{Min: in.body.Min, Max: in.body.Max}, ConsecutiveFailures: failures,
		}
	}
	p.nextAllowed = in.now.Add(backoff(in.cooldown, failures))
	if !ok {
		d := in.d
		p.retry = &d
	}
	return p
}

func errOrNil(ok bool, err error) error {
	if ok {
		return nil
	}
	return err
}

// record writes a call's outcome to the store and the audit log, and emits
// its events. It uses a context detached from shutdown, briefly bounded, so
// that a call that did happen is not lost from the audit log.
func (c *Controller) record(ctx context.Context, o outcome) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	log := c.log.With(logkey.OrgID, o.rec.OrgID, logkey.Hostname, o.rec.Hostname, logkey.Path, o.rec.Path, logkey.RecordID, o.rec.ID)

	if o.persist {
		// At is left to the store's clock, and the waits count from it:
		// no time of this server's clock is stored.
		call := store.ScalingCall{Reason: string(o.d.reason), Status: o.status,
			ConsecutiveFailures: o.rec.ConsecutiveFailures, Disarmed: o.rec.Disarmed,
			NextCallIn: max(0, o.next.Sub(o.at)), PenaltyFor: max(0, o.penalty.Sub(o.at)),
			Holder: c.cfg.Holder, Generation: o.gen}
		if o.err != nil {
			call.Err = o.err.Error()
		}
		_, err := c.store.RecordScalingCall(ctx, o.rec.ID, call)
		switch {
		case errors.Is(err, store.ErrNotFound):
			c.forgetRecord(o.rec.ID)
		case errors.Is(err, store.ErrConflict):
			// Another server took the lease over while this call ran (this
			// one stalled past its lease): its call's outcome stands.
			log.Warn("scaling call outcome not stored: its lease was taken over", logkey.Err, err)
		case err != nil:
			log.Error("scaling call not recorded", logkey.Err, err)
		}
	}

	typ := EventRequested
	if o.err != nil {
		typ = EventFailed
		log.Warn("scaling call failed", logkey.Reason, o.d.reason, logkey.Current, o.d.current,
			logkey.Desired, o.d.desired, logkey.Status, o.status, logkey.ConsecutiveFailures, o.rec.ConsecutiveFailures, logkey.Err, o.err)
	} else {
		log.Info("scaling call accepted", logkey.Reason, o.d.reason, logkey.Current, o.d.current,
			logkey.Desired, o.d.desired, logkey.Status, o.status)
	}
	c.emit(ctx, typ, o)
	if o.disarmed {
		log.Error("scaling record disarmed", logkey.ConsecutiveFailures, o.rec.ConsecutiveFailures)
		c.emit(ctx, EventDisarmed, o)
	}
}

// emit appends one audit entry about o and hands the event to webhook
// delivery, through the server's one emit path.
func (c *Controller) emit(ctx context.Context, typ string, o outcome) {
	c.emitter.Emit(ctx, events.Event{
		Kind: typ, At: o.at, OrgID: o.rec.OrgID, Actor: auditActor,
		Hostname: o.rec.Hostname, Path: o.rec.Path, Detail: o.detail(), Data: o.event(typ),
	})
}

// maxAuditErrBytes bounds the error text in an audit entry's detail.
// With MaxRecordedSamples samples, it keeps a detail under about 1.5 KiB.
const maxAuditErrBytes = 256

// auditDetail is the audit detail of a scaling call, as JSON: why the call
// was made (the reason and the utilization samples that caused it, against
// the target), what it asked, and how it went.
type auditDetail struct {
	Reason  Reason `json:"reason"`
	Current int    `json:"current"`
	Desired int    `json:"desired"`
	Min     int    `json:"min"`
	Max     int    `json:"max"`
	// Target is the record's target utilization; Window the stretch of
	// samples a scale-out needs (a scale-in needs IdleWindows of them).
	Target float64 `json:"target"`
	Window string  `json:"window"`
	Path   string  `json:"path,omitempty"`
	// Samples counts the utilization samples of the stretch that caused
	// the decision; MinUtilization and MaxUtilization range over all of
	// them, Utilization lists the latest (at most MaxRecordedSamples,
	// oldest first, rounded to 3 decimals). None for a cold start.
	Samples        int       `json:"samples,omitempty"`
	MinUtilization *float64  `json:"min_utilization,omitempty"`
	MaxUtilization *float64  `json:"max_utilization,omitempty"`
	Utilization    []float64 `json:"utilization,omitempty"`

	Status              int    `json:"status"`
	ConsecutiveFailures int    `json:"consecutive_failures"`
	IdempotencyKey      string `json:"idempotency_key"`
	Error               string `json:"error,omitempty"`
}

// detail is the audit detail of o, JSON (auditDetail), bounded in size.
func (o outcome) detail() string {
	d := auditDetail{
		Reason: o.d.reason, Current: o.d.current, Desired: o.d.desired, Min: o.rec.Min, Max: o.rec.Max,
		Target: o.rec.TargetUtilization, Window: o.rec.Window.String(), Path: o.rec.Path,
		Status: o.status, ConsecutiveFailures: o.rec.ConsecutiveFailures, IdempotencyKey: o.d.key,
	}
	if s := o.d.samples; s.n > 0 {
		lo, hi := round3(s.min), round3(s.max)
		d.Samples, d.MinUtilization, d.MaxUtilization = s.n, &lo, &hi
		d.Utilization = make([]float64, 0, len(s.recent))
		for _, u := range s.recent {
			d.Utilization = append(d.Utilization, round3(u))
		}
	}
	if o.err != nil {
		d.Error = o.err.Error()
		if len(d.Error) > maxAuditErrBytes {
			d.Error = strings.ToValidUTF8(d.Error[:maxAuditErrBytes], "") + "…"
		}
	}
	b, err := json.Marshal(d)
	if err != nil { // only a non-finite float could get here: keep the entry, say what is missing
		return fmt.Sprintf(`{"reason":%q,"current":%d,"desired":%d,"error":"detail not encodable"}`, o.d.reason, o.d.current, o.d.desired)
	}
	return string(b)
}

// round3 rounds a utilization to 3 decimals for the audit log.
func round3(u float64) float64 { return math.Round(u*1000) / 1000 }

// event is o as an event of type typ.
func (o outcome) event(typ string) Event {
	e := Event{
		Type: typ, At: o.at,
		RecordID: o.rec.ID, OrgID: o.rec.OrgID, Hostname: o.rec.Hostname, Path: o.rec.Path,
		Reason: string(o.d.reason), Current: o.d.current, Desired: o.d.desired, Min: o.rec.Min, Max: o.rec.Max,
		Status: o.status, ConsecutiveFailures: o.rec.ConsecutiveFailures,
		Utilization: o.d.samples.recent, IdempotencyKey: o.d.key,
	}
	if o.err != nil {
		e.Err = o.err.Error()
	}
	return e
}
