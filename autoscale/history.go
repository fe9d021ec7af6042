package autoscale

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/recovery"
)

// What the controller remembers of each record, for GET /scaling/{id} and
// the event stream (docs/autoscaling.md, "Watching it").
const (
	// HistoryDecisions is how many decisions a record keeps, the latest.
	HistoryDecisions = 20
	// HistoryPoints is how many pool samples a record keeps, the latest:
	// one per SampleInterval, so two minutes.
	HistoryPoints = 120
	// HistorySamples bounds the utilization samples kept with one
	// decision, the latest of its stretch.
	HistorySamples = 30
	// DecisionBuffer bounds the decisions waiting for Config.OnDecision;
	// beyond it a decision is not reported (counted in
	// Metrics.DecisionsDropped).
	DecisionBuffer = 256
)

// Reasons of the decisions the history records, in words.
const (
	whyScaleOut     = "utilization at or above target for a whole window"
	whyScaleIn      = "utilization below half the target for 4 windows"
	whyColdStart    = "a request found the pool empty"
	whyOutCooldown  = "utilization at or above target for a whole window; held by the cooldown"
	whyOutBackoff   = "utilization at or above target for a whole window; held by the backoff after a failed call"
	whyOutAtMax     = "utilization at or above target for a whole window; the pool is at max"
	whyInCooldown   = "utilization below half the target for 4 windows; held by the cooldown"
	whyInBackoff    = "utilization below half the target for 4 windows; held by the backoff after a failed call"
	whyQueueFull    = "call queue full"
	whyReplacedByCS = "replaced by a cold start"
)

// history is what the controller remembers of one record: its latest
// decisions and pool samples, in rings of fixed size. It is allocated once,
// when the record is first sampled or decided, and never grows: under
// 9 KiB (TestHistorySize pins the bound), plus at most maxAuditErrBytes of
// error text per decision (the reasons are constants), so under 14 KiB: a
// server holding N records spends at most N × 14 KiB on them (1.4 MiB for
// the 100 records one organization may hold by default). It belongs to one
// record ID and is dropped with it. Owned by the controller's owner
// goroutine.
type history struct {
	recordID  string
	decisions [HistoryDecisions]histDecision
	nd        int // decisions ever recorded; the newest is decisions[(nd-1)%HistoryDecisions]
	points    [HistoryPoints]histPoint
	np        int // points ever recorded
}

// histDecision is one decision as the history keeps it (apitype.ScalingDecision
// without the record's names and with its samples inline).
type histDecision struct {
	seq              uint64
	at, updated      time.Time
	action, reason   string
	current, desired int
	outcome          string
	status           int
	err              string
	disarmed         bool
	repeats          int
	sampleCount      int
	k                int // samples[:k] are set, oldest first
	samples          [HistorySamples]float32
}

// histPoint is one pool sample, packed: 24 bytes rather than 48, for the
// HistoryPoints of every record.
type histPoint struct {
	at                            int64 // Unix nanoseconds
	instances, capacity, inflight int32
}

// clamp32 fits a pool figure in a histPoint.
func clamp32(n int) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
}

// newest returns the latest decision; nil when there is none.
func (h *history) newest() *histDecision {
	if h.nd == 0 {
		return nil
	}
	return &h.decisions[(h.nd-1)%HistoryDecisions]
}

// find returns the decision numbered seq, if it is still kept.
func (h *history) find(seq uint64) *histDecision {
	for i := range min(h.nd, HistoryDecisions) {
		if d := &h.decisions[i]; d.seq == seq {
			return d
		}
	}
	return nil
}

// setSamples keeps the latest HistorySamples of recent (oldest first) out
// of n samples.
func (d *histDecision) setSamples(n int, recent []float64) {
	recent = recent[max(0, len(recent)-HistorySamples):]
	d.sampleCount, d.k = n, len(recent)
	for i, u := range recent {
		d.samples[i] = float32(u)
	}
}

// setRunSamples keeps the latest samples of r, without allocating.
func (d *histDecision) setRunSamples(r *run) {
	k := min(r.n, MaxRecordedSamples, HistorySamples)
	d.sampleCount, d.k = r.n, k
	for i := range k {
		d.samples[i] = float32(r.ring[(r.n-k+i)%MaxRecordedSamples])
	}
}

// historyLocked returns the history of b's record, creating it; nil when b
// has no record. A history of another record ID (the record was deleted
// and declared again) is dropped.
func (c *Controller) historyLocked(b *bind) *history {
	if b.rec == nil {
		b.hist = nil
		return nil
	}
	if b.hist == nil || b.hist.recordID != b.rec.ID {
		b.hist = &history{recordID: b.rec.ID}
	}
	return b.hist
}

// pointLocked records a sample st of b's pool taken at now.
func (c *Controller) pointLocked(b *bind, st PoolStats, now time.Time) {
	h := c.historyLocked(b)
	if h == nil {
		return
	}
	h.points[h.np%HistoryPoints] = histPoint{at: now.UnixNano(),
		instances: clamp32(st.Instances), capacity: clamp32(st.Capacity), inflight: clamp32(st.Inflight)}
	h.np++
}

// noteLocked records a new decision of b, made at now, and reports it; it
// returns the decision's number (0 when b has no record, so nothing was
// recorded). fill sets what is particular to it.
func (c *Controller) noteLocked(b *bind, now time.Time, action, reason, outcome string, current, desired int, fill func(*histDecision)) uint64 {
	h := c.historyLocked(b)
	if h == nil {
		return 0
	}
	c.noteSeq++
	d := &h.decisions[h.nd%HistoryDecisions]
	*d = histDecision{seq: c.noteSeq, at: now, updated: now, action: action, reason: reason,
		outcome: outcome, current: current, desired: desired}
	if fill != nil {
		fill(d)
	}
	h.nd++
	c.reportLocked(b, d)
	return d.seq
}

// repeatLocked records a decision that makes no call (held or refused) of
// b at now: the same decision as the latest one only updates it, so that
// a pool held for minutes by its cooldown takes one entry, not one per
// sample. It does not allocate once b has a history.
func (c *Controller) repeatLocked(b *bind, now time.Time, action, reason, outcome string, current, desired int, src *run) {
	h := c.historyLocked(b)
	if h == nil {
		return
	}
	if d := h.newest(); d != nil && d.action == action && d.reason == reason && d.outcome == outcome {
		d.updated, d.current, d.desired = now, current, desired
		d.repeats++
		if src != nil {
			d.setRunSamples(src)
		}
		return
	}
	c.noteLocked(b, now, action, reason, outcome, current, desired, func(d *histDecision) {
		if src != nil {
			d.setRunSamples(src)
		}
		if outcome == apitype.ScalingOutcomeRefused {
			d.err = whyQueueFull
		}
	})
}

// endNoteLocked sets the outcome of decision seq of b, made at now, and
// reports it. A decision no longer kept, or of a record b no longer
// holds, is left alone.
func (c *Controller) endNoteLocked(b *bind, seq uint64, now time.Time, outcome string, status int, err string, disarmed bool) {
	d := c.keptLocked(b, seq)
	if d == nil {
		return
	}
	d.updated, d.outcome, d.status, d.err, d.disarmed = now, outcome, status, clipError(err), disarmed
	c.reportLocked(b, d)
}

// clipError bounds an error text kept in a history to maxAuditErrBytes, as
// in the audit log, so that a history's size stays bounded.
func clipError(s string) string {
	if len(s) <= maxAuditErrBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxAuditErrBytes], "") + "…"
}

// renoteLocked updates the body of decision seq of b, brought up to date
// before its call.
func (c *Controller) renoteLocked(b *bind, seq uint64, current, desired int) {
	if d := c.keptLocked(b, seq); d != nil {
		d.current, d.desired = current, desired
	}
}

// keptLocked returns decision seq of b's current record, if still kept.
func (c *Controller) keptLocked(b *bind, seq uint64) *histDecision {
	if seq == 0 || b.hist == nil || b.rec == nil || b.hist.recordID != b.rec.ID {
		return nil
	}
	return b.hist.find(seq)
}

// reportLocked hands d to Config.OnDecision without blocking: a full
// buffer drops it, counted.
func (c *Controller) reportLocked(b *bind, d *histDecision) {
	if c.notes == nil || c.closed {
		return
	}
	select {
	case c.notes <- c.wireDecision(b, b.hist.recordID, d):
	default:
		c.metrics.DecisionsDropped++
	}
}

// wireDecision is d, a decision of b's record id, as the API shows it.
func (c *Controller) wireDecision(b *bind, id string, d *histDecision) apitype.ScalingDecision {
	out := apitype.ScalingDecision{
		Seq: d.seq, RecordID: id, OrgID: b.key.org, Hostname: b.key.host, Path: b.key.path,
		At: d.at, UpdatedAt: d.updated, Action: d.action, Reason: d.reason,
		Samples: make([]float64, d.k), SampleCount: d.sampleCount,
		Current: d.current, Desired: d.desired, Outcome: d.outcome, Status: d.status,
		Error: d.err, Disarmed: d.disarmed, Repeats: d.repeats,
	}
	for i := range d.k {
		out.Samples[i] = round3(float64(d.samples[i]))
	}
	return out
}

// noteLoop hands the decisions reported to Config.OnDecision, one at a
// time and in order, until ctx ends; a slow OnDecision only fills the
// buffer, never the controller.
func (c *Controller) noteLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-c.notes:
			c.tell(d)
		}
	}
}

// tell hands d to Config.OnDecision; a panic in it is recovered, logged
// and counted (internal/recovery), and the next decision is told.
func (c *Controller) tell(d apitype.ScalingDecision) {
	defer recovery.Recover(c.log, "autoscale OnDecision")
	c.cfg.OnDecision(d)
}

// History is what the controller remembers of one record: for GET
// /scaling/{id}. It is empty for a record the controller does not hold in
// memory (another server's change not yet loaded, or one not sampled or
// decided since this server started).
type History struct {
	// Decisions are the latest decisions, newest first: at most
	// HistoryDecisions.
	Decisions []apitype.ScalingDecision
	// Series are the latest pool samples, oldest first: at most
	// HistoryPoints.
	Series []apitype.ScalingPoint
}

// History returns what the controller remembers of record id; both lists
// are empty, never nil, when it remembers nothing or has stopped. The
// owner copies it, without I/O; it is safe for concurrent use.
func (c *Controller) History(id string) History {
	out := History{Decisions: []apitype.ScalingDecision{}, Series: []apitype.ScalingPoint{}}
	// Failing, the owner has stopped: it remembers nothing.
	_ = c.do(context.Background(), func() { out = c.copyHistoryLocked(id) })
	return out
}

// copyHistoryLocked is History, on the owner.
func (c *Controller) copyHistoryLocked(id string) History {
	out := History{Decisions: []apitype.ScalingDecision{}, Series: []apitype.ScalingPoint{}}
	b := c.byID[id]
	if b == nil || b.hist == nil || b.hist.recordID != id {
		return out
	}
	h := b.hist
	nd := min(h.nd, HistoryDecisions)
	out.Decisions = make([]apitype.ScalingDecision, 0, nd)
	for i := range nd {
		out.Decisions = append(out.Decisions, c.wireDecision(b, id, &h.decisions[(h.nd-1-i)%HistoryDecisions]))
	}
	np := min(h.np, HistoryPoints)
	out.Series = make([]apitype.ScalingPoint, 0, np)
	for i := h.np - np; i < h.np; i++ {
		p := h.points[i%HistoryPoints]
		wp := apitype.ScalingPoint{At: time.Unix(0, p.at).UTC(),
			Instances: int(p.instances), Capacity: int(p.capacity), Inflight: int(p.inflight)}
		if p.capacity > 0 {
			u := round3(float64(p.inflight) / float64(p.capacity))
			wp.Utilization = &u
		}
		out.Series = append(out.Series, wp)
	}
	return out
}
