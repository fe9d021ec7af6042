package autoscale

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
)

// Rules of calling a provider (docs/autoscaling.md).
const (
	// SampleInterval is how often each armed record's pool is sampled.
	SampleInterval = time.Second
	// IdleWindows is how many windows utilization must stay below half the
	// target before a scale-in.
	IdleWindows = 4
	// MaxBackoff caps the wait after a failed call (cooldown × 2^failures).
	MaxBackoff = 15 * time.Minute
	// MaxFailures consecutive failed calls disarm a record.
	MaxFailures = 5
	// MaxInFlight is the most calls in flight at once, across all records.
	MaxInFlight = 8
	// DefaultMaxQueued bounds the decisions waiting for a call slot. Each
	// bind has at most one waiting, so this is the number of binds that
	// can be waiting at once; beyond it a decision is refused
	// (ErrQueueFull, counted in Metrics.QueueRejected and logged).
	DefaultMaxQueued = 4096
	// DefaultMaxCallsPerMinute is scaling_max_calls_per_minute's default.
	DefaultMaxCallsPerMinute = 60
	// MaxCallsPerMinuteLimit is the largest MaxCallsPerMinute accepted.
	MaxCallsPerMinuteLimit = 1_000_000
	// DefaultCallTimeout bounds one call.
	DefaultCallTimeout = 10 * time.Second
	// MaxCallTimeout is the largest CallTimeout accepted: a call must end
	// well inside the lease that makes it single-flight (LeaseTTL).
	MaxCallTimeout = time.Minute
	// LeaseMargin is how much longer a call's lease lasts than the call
	// may: the time its outcome has to reach the store (the write that
	// releases the lease is bounded by it too).
	LeaseMargin = 5 * time.Second
	// DefaultRefreshInterval is how often records are reloaded from the
	// store, to see other servers' changes.
	DefaultRefreshInterval = 30 * time.Second
	// DefaultDeclareRefresh is Config.DeclareRefresh's default.
	DefaultDeclareRefresh = time.Minute
	// PenaltyBase is a provider host's wait after its first 429 answer; it
	// doubles with each further 429, up to MaxPenalty.
	PenaltyBase = time.Second
	// MaxPenalty caps one 429 penalty.
	MaxPenalty = 5 * time.Minute
	// MaxRecordedSamples bounds the utilization samples kept with a
	// decision for its audit entry and event: the latest ones.
	MaxRecordedSamples = 64
	// DefaultMaxRecordsPerOrg is scaling_max_records_per_org's default.
	DefaultMaxRecordsPerOrg = 100
	// DefaultMaxRecordsPerToken is scaling_max_records_per_token's default.
	DefaultMaxRecordsPerToken = 32
)

// Errors callers may branch on.
var (
	// ErrNoRecord means the bind has no scaling record.
	ErrNoRecord = errors.New("autoscale: no scaling record")
	// ErrDisarmed means the breaker disarmed the record: no call is made
	// until it is re-armed.
	ErrDisarmed = errors.New("autoscale: scaling record disarmed")
	// ErrQueueFull means the decision could not be queued: too many binds
	// are already waiting for a call slot.
	ErrQueueFull = errors.New("autoscale: call queue full")
	// ErrClosed means Run has returned.
	ErrClosed = errors.New("autoscale: controller stopped")
	// ErrRecordLimit means a declaration would create a record, or add an
	// armer to one, beyond Config.MaxRecordsPerOrg or
	// Config.MaxRecordsPerToken.
	ErrRecordLimit = errors.New("autoscale: scaling record limit reached")
	// ErrBindTaken means another organization already holds a record for
	// the bind: the first organization to arm a bind keeps it until its
	// record goes.
	ErrBindTaken = errors.New("autoscale: bind armed by another organization")
)

// auditActor is the audit log's actor for the controller's entries.
const auditActor = "autoscale"

// Config configures a Controller. Store, Pool and Caller are required;
// every other zero field means its default.
type Config struct {
	// Store persists records, calls and audit entries.
	Store Store
	// Pool reports each bind's live pool.
	Pool PoolView
	// Caller makes the hook calls.
	Caller Caller
	// Events receives each call and disarm for webhook delivery, after
	// its audit entry (the event's Data is an Event); nil delivers none,
	// and the audit entries are written all the same.
	Events events.Sink
	// Logger receives state changes (armed, disarmed, conflicts, dropped
	// decisions, store failures); nil discards them.
	Logger *slog.Logger
	// MaxCallsPerMinute is scaling_max_calls_per_minute: a global token
	// bucket on calls started, of that capacity, starting with one token
	// and refilling MaxCallsPerMinute/60 tokens a second. 0 means
	// DefaultMaxCallsPerMinute; at most MaxCallsPerMinuteLimit.
	MaxCallsPerMinute int
	// MaxQueued bounds the decisions waiting for a call slot; 0 means
	// DefaultMaxQueued.
	MaxQueued int
	// CallTimeout bounds one call; 0 means DefaultCallTimeout, at most
	// MaxCallTimeout. A call that runs out of it has failed. The call's
	// lease lasts CallTimeout + LeaseMargin (see LeaseTTL).
	CallTimeout time.Duration
	// Holder names this controller to the other servers sharing the
	// store, as the holder of the leases it takes; "" means a random name
	// per controller (each server process is its own holder).
	Holder string
	// RefreshInterval is how often records are reloaded from the store, so
	// that records created, disarmed or deleted by another server are
	// seen; 0 means DefaultRefreshInterval. A store that offers a change
	// feed (Subscribe, as *store.DB does) also triggers a reload when a
	// record this controller does not know appears or one is deleted.
	RefreshInterval time.Duration
	// DeclareRefresh is how long a record's stored declaration is trusted
	// before an unchanged declaration is written again (to move its
	// UpdatedAt, which the scaling_record_ttl sweep reads); 0 means
	// DefaultDeclareRefresh. A changed declaration, a new armer, or one
	// that re-arms a disarmed or failing record is written at once.
	DeclareRefresh time.Duration
	// MaxRecordsPerOrg is scaling_max_records_per_org: the most records one
	// organization may hold. A declaration that would create one more is
	// refused with ErrRecordLimit, before any store access. 0 means
	// DefaultMaxRecordsPerOrg.
	MaxRecordsPerOrg int
	// MaxRecordsPerToken is scaling_max_records_per_token: the most records
	// one client token may arm (the master token is bounded only by
	// MaxRecordsPerOrg). 0 means DefaultMaxRecordsPerToken.
	MaxRecordsPerToken int
	// Policy, when set, judges a declared hook URL against the server's
	// outbound policy without I/O (*outbound.Client does): a URL it refuses
	// is refused at declaration. nil leaves every URL to the Caller, at
	// call time.
	Policy URLChecker
	// DefaultOrgID is the server's default organization (the master
	// token's, and a single-tenant server's only one). A hook call for one
	// of its records says "org_id": null, as the specification's body does
	// for a deployment without organizations; every other record's call
	// carries its organization's ID. "" sends every record's ID.
	DefaultOrgID string
	// OnDecision, when set, is told of every decision the controller
	// records in a record's history (see History): when it is made, and
	// again when its outcome is known; a held decision repeated by later
	// samples is told once. It is called from one goroutine of Run's, in
	// order, never by the controller's owner goroutine: decisions wait for it
	// in a buffer of DecisionBuffer, and one that finds the buffer full
	// is not told (counted in Metrics.DecisionsDropped), so a slow
	// OnDecision never holds the controller up. nil tells no one.
	OnDecision func(apitype.ScalingDecision)
	// Now is this server's clock; nil means time.Now. It times what only
	// this server decides (sampling windows, its own queue and timers).
	// What servers sharing the store decide together (leases, cooldowns,
	// backoffs, penalties, the cold-start join window, the calls-per-minute
	// budget) is decided by the store's clock (Store.Clock); the
	// controller converts between the two by the offset it measures at
	// each reload and each lease, so a server whose clock is off still
	// agrees with the others.
	Now func() time.Time
}

// withDefaults fills the zero fields that have a default.
func (cfg Config) withDefaults() Config {
	def := DefaultConfig()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DeclareRefresh == 0 {
		cfg.DeclareRefresh = def.DeclareRefresh
	}
	if cfg.MaxCallsPerMinute == 0 {
		cfg.MaxCallsPerMinute = def.MaxCallsPerMinute
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = def.MaxQueued
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = def.CallTimeout
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = def.RefreshInterval
	}
	if cfg.MaxRecordsPerOrg == 0 {
		cfg.MaxRecordsPerOrg = def.MaxRecordsPerOrg
	}
	if cfg.MaxRecordsPerToken == 0 {
		cfg.MaxRecordsPerToken = def.MaxRecordsPerToken
	}
	if cfg.Holder == "" {
		cfg.Holder = "srv_" + rand.Text()
	}
	return cfg
}

// DefaultConfig returns the controller's default settings, each the
// Default constant of its field; Store, Pool, Caller, Events and Logger are
// nil. New fills any zero setting from it.
func DefaultConfig() Config {
	return Config{
		MaxCallsPerMinute:  DefaultMaxCallsPerMinute,
		MaxQueued:          DefaultMaxQueued,
		CallTimeout:        DefaultCallTimeout,
		RefreshInterval:    DefaultRefreshInterval,
		DeclareRefresh:     DefaultDeclareRefresh,
		MaxRecordsPerOrg:   DefaultMaxRecordsPerOrg,
		MaxRecordsPerToken: DefaultMaxRecordsPerToken,
	}
}

// LeaseTTL is how long the lease of one call lasts: the call's timeout and
// the LeaseMargin its outcome has to be stored in. A holder that dies
// mid-call blocks the record's calls that long at most.
func (cfg Config) LeaseTTL() time.Duration {
	t := cfg.CallTimeout
	if t == 0 {
		t = DefaultCallTimeout
	}
	return t + LeaseMargin
}

// Validate reports every problem with cfg's settings; the required Store,
// Pool and Caller, which New checks, are not settings.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MaxCallsPerMinute < 0 || cfg.MaxCallsPerMinute > MaxCallsPerMinuteLimit {
		errs = append(errs, fmt.Errorf("autoscale: max calls per minute %d is not in [0,%d]", cfg.MaxCallsPerMinute, MaxCallsPerMinuteLimit))
	}
	if cfg.MaxQueued < 0 {
		errs = append(errs, fmt.Errorf("autoscale: max queued %d is negative", cfg.MaxQueued))
	}
	if cfg.CallTimeout < 0 || cfg.CallTimeout > MaxCallTimeout {
		errs = append(errs, fmt.Errorf("autoscale: call timeout %v is not in [0,%v]", cfg.CallTimeout, MaxCallTimeout))
	}
	if cfg.RefreshInterval < 0 {
		errs = append(errs, fmt.Errorf("autoscale: refresh interval %v is negative", cfg.RefreshInterval))
	}
	if cfg.MaxRecordsPerOrg < 0 {
		errs = append(errs, fmt.Errorf("autoscale: max records per org %d is negative", cfg.MaxRecordsPerOrg))
	}
	if cfg.MaxRecordsPerToken < 0 {
		errs = append(errs, fmt.Errorf("autoscale: max records per token %d is negative", cfg.MaxRecordsPerToken))
	}
	return errors.Join(errs...)
}

// Controller makes the autoscaling decisions for every record. Declare,
// Arm, Leave, ColdStart, PlanColdStart, List, Disarm, History and Metrics
// are safe for concurrent use; sampling and calls happen only while Run
// runs. After Run returns (or Close), they answer ErrClosed, or a zero
// answer where they return no error (Metrics: the last figures).
//
// All decision state (the records it knows, each bind's samples, cooldown
// and breaker, the call queue, host penalties, the token bucket) has one
// owner: a goroutine New starts, which only ever runs short requests that
// neither block nor do I/O (owner.go). The methods, the loops and the
// workers that call hooks and write the store send it requests and wait
// for the reply; the store, pool and caller are called off the owner.
//
// The decisions about a bind are pure functions of its state, the event
// and the time, which return the new state and the effects (a record to
// write, a call to queue, a flight to join, an outcome to record and
// emit): planDeclare, planSample, planColdStart, planRequeue, planLease,
// planOutcome and planReload. The methods are shells: a request to the
// owner reads the state, plans and applies the plan, and the caller or a
// worker performs its I/O off the owner.
//
// Servers sharing the store call once per decision: each call first takes
// the record's lease in the store (lease, dispatch.go), and the state
// every call leaves (cooldown, backoff, penalty) is stored with its
// outcome and honoured by every controller that loads the record. The
// caps on records (admitLocked) and the call queue's order and politeness
// (dispatch.go) are still decided in place.
type Controller struct {
	cfg    Config
	store  Store
	pool   PoolView
	caller Caller
	// emitter writes each event's audit entry and hands it to
	// Config.Events: the server's one emit path.
	emitter *events.Emitter
	log     *slog.Logger

	started atomic.Bool
	loaded  chan struct{}                // closed once Run's first load of records is done
	done    chan struct{}                // closed when Run returns (or Close ran without Run)
	wake    chan struct{}                // 1-buffered: the dispatcher has work
	reload  chan struct{}                // 1-buffered: reload records soon
	notes   chan apitype.ScalingDecision // decisions for Config.OnDecision; nil without one
	wg      sync.WaitGroup               // Run's loops and workers

	reqs      chan request  // requests for the owner (owner.go); unbuffered
	stopOwner chan struct{} // closed to stop the owner
	ownerDone chan struct{} // closed when the owner has exited
	quit      chan struct{} // closed by Close
	stopping  sync.Once     // closes stopOwner
	closing   sync.Once     // closes quit
	// final are the metrics as the owner left them, for Metrics after it
	// stopped; written by the owner's last request, read after ownerDone.
	final Metrics

	// The following fields are the decision state: only the owner
	// goroutine (owner.go) reads or writes them.
	binds        map[bindKey]*bind
	byBind       map[hostPath][]*bind  // the binds of every organization for a hostname and path
	byID         map[string]*bind      // binds with a record, by record ID
	sessionBinds map[string][]bindKey  // live session → the binds it announced
	queue        []*item               // decisions waiting for a call slot, oldest first
	inflight     int                   // calls in flight
	hosts        map[string]*hostState // provider hosts with a penalty or a Retry-After
	hostCalls    map[string]int        // calls in flight by provider host
	bucket       bucket
	offset       time.Duration // the store's clock minus this server's (clock.go)
	seq          uint64        // orders sessions and queue items
	writes       uint64        // counts the record writes landed (see bind.landed)
	noteSeq      uint64        // numbers the decisions recorded in histories
	closed       bool
	metrics      Metrics
	quota        quota // records held and being created, per org and armer

	refused refusals // declarations refused by validateDeclaration; its own lock
	// learning shares the store reads of learn between the concurrent
	// cold starts of one bind.
	learning singleflight.Group
}

// bindKey names a bind.
type bindKey struct{ org, host, path string }

// hostPath names a bind across organizations.
type hostPath struct{ host, path string }

// bind is everything the controller knows about one bind. All fields are
// owned by the controller's owner goroutine.
type bind struct {
	key bindKey

	rec       *Record // the record as last known; nil when there is none
	host      string  // the provider host of rec.URL, for politeness
	sessions  map[string]*announcer
	declaring int // Declare calls in progress or waiting for their turn
	// turn is set while a Declare of the bind plans, writes and applies;
	// it is closed when that Declare is done. Declarations of one bind
	// take turns, so that each plans against the record the previous one
	// stored.
	turn chan struct{}

	busy, idle  run       // the current busy and idle stretches
	nextAllowed time.Time // no call before: cooldown, or backoff after a failure
	lastCallEnd time.Time
	retry       *decision // the last failed decision: its retry reuses the key
	hist        *history  // the record's decisions and pool samples; nil until the first
	queued      *item     // the decision waiting for a slot
	running     *item     // the call in flight
	start       *Start    // the latest cold start flight
	// routableAt is when a sample last found the pool routable (zero:
	// never since this controller started). A recorded call older than
	// it is not joined (acceptedColdStart).
	routableAt time.Time

	// writing counts the store writes of the record in progress (a
	// declaration, a call's outcome), and landed is Controller.writes
	// when the last of them landed or the record was forgotten. A reload
	// takes a listed record only for a bind with neither since its list
	// was read (see refresh): a list is never newer than such a write.
	writing int
	landed  uint64
	// releases counts the release notices of the record's lease seen
	// (leaseReleased): a lease attempt that saw another server's live
	// lease and finds the count moved since it began knows that lease
	// already ended, and tries again at once.
	releases uint64
}

// New returns a controller. It does no I/O; it starts the goroutine that
// owns the controller's state (owner.go), which the end of Run stops, or
// Close when Run is never called. Run loads the records.
func New(cfg Config) (*Controller, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("autoscale: no store"))
	}
	if cfg.Pool == nil {
		errs = append(errs, errors.New("autoscale: no pool view"))
	}
	if cfg.Caller == nil {
		errs = append(errs, errors.New("autoscale: no caller"))
	}
	if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var notes chan apitype.ScalingDecision
	if cfg.OnDecision != nil {
		notes = make(chan apitype.ScalingDecision, DecisionBuffer)
	}
	c := &Controller{
		reqs:         make(chan request),
		stopOwner:    make(chan struct{}),
		ownerDone:    make(chan struct{}),
		quit:         make(chan struct{}),
		notes:        notes,
		cfg:          cfg,
		store:        cfg.Store,
		pool:         cfg.Pool,
		caller:       cfg.Caller,
		emitter:      events.New(events.Config{Audit: cfg.Store, Sink: cfg.Events, Logger: cfg.Logger}),
		log:          cfg.Logger,
		loaded:       make(chan struct{}),
		done:         make(chan struct{}),
		wake:         make(chan struct{}, 1),
		reload:       make(chan struct{}, 1),
		binds:        map[bindKey]*bind{},
		byBind:       map[hostPath][]*bind{},
		byID:         map[string]*bind{},
		sessionBinds: map[string][]bindKey{},
		hosts:        map[string]*hostState{},
		hostCalls:    map[string]int{},
		bucket:       newBucket(cfg.MaxCallsPerMinute, nowOf(cfg)),
	}
	go c.ownerLoop()
	return c, nil
}

// Run loads the records, then samples pools, makes calls and reloads
// records until ctx ends. It returns nil after ctx ends, once every
// goroutine it started has exited; calls in flight are cancelled (their
// outcome is not recorded) and pending cold starts fail with ErrClosed. A
// second Run returns an error at once, and so does a Run after Close
// (ErrClosed). Close ends Run as ctx's end does.
func (c *Controller) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		select {
		case <-c.quit:
			return ErrClosed
		default:
		}
		return errors.New("autoscale: Run called twice")
	}
	defer close(c.done)
	defer c.endOwner()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.wg.Go(func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	})
	// The first load is a best effort: if the store is down, cold starts
	// answer ErrNoRecord until the next reload rather than holding
	// visitors on a database outage.
	c.refresh(ctx)
	close(c.loaded)

	c.wg.Go(func() { c.sampleLoop(ctx) })
	c.wg.Go(func() { c.refreshLoop(ctx) })
	c.wg.Go(func() { c.dispatchLoop(ctx) })
	if c.notes != nil {
		c.wg.Go(func() { c.noteLoop(ctx) })
	}
	if src, ok := c.store.(changeSource); ok {
		changes := src.Subscribe(ctx)
		c.wg.Go(func() { c.changeLoop(ctx, changes) })
	}
	<-ctx.Done()
	c.wg.Wait()

	// The owner's last request: what is still queued fails, and the
	// figures stay readable for Metrics once the owner has stopped.
	// An error here is a panic the owner recovered and logged.
	_ = c.do(context.Background(), func() {
		c.closed = true
		for len(c.queue) > 0 {
			c.dropLocked(c.queue[0], ErrClosed, "controller stopped")
		}
		c.final = c.metricsLocked()
	})
	return nil
}

// newBindLocked creates and indexes the bind k.
func (c *Controller) newBindLocked(k bindKey) *bind {
	b := &bind{key: k, sessions: map[string]*announcer{}}
	c.binds[k] = b
	hp := hostPath{k.host, k.path}
	c.byBind[hp] = append(c.byBind[hp], b)
	return b
}

// gcLocked forgets b once nothing refers to it.
func (c *Controller) gcLocked(b *bind) {
	if b.rec != nil || len(b.sessions) > 0 || b.declaring > 0 || b.queued != nil || b.running != nil || b.writing > 0 {
		return
	}
	if c.binds[b.key] != b {
		return
	}
	delete(c.binds, b.key)
	hp := hostPath{b.key.host, b.key.path}
	bs := c.byBind[hp]
	for i, x := range bs {
		if x == b {
			bs = append(bs[:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(c.byBind, hp)
	} else {
		c.byBind[hp] = bs
	}
}

// lookupLocked returns the bind of a record for hostname and path in
// orgID, or, when orgID is "", in whichever organization declared it most
// recently (an empty pool has no client left to say whose it is).
func (c *Controller) lookupLocked(orgID, hostname, path string) *bind {
	if orgID != "" {
		if b := c.binds[bindKey{orgID, hostname, path}]; b != nil && b.rec != nil {
			return b
		}
		return nil
	}
	var best *bind
	for _, b := range c.byBind[hostPath{hostname, path}] {
		if b.rec != nil && (best == nil || b.rec.UpdatedAt.After(best.rec.UpdatedAt)) {
			best = b
		}
	}
	return best
}

// setRecLocked sets b's record (nil: none) and keeps the ID index.
// It may forget b (gcLocked) when r is nil.
func (c *Controller) setRecLocked(b *bind, r *Record) {
	if b.rec != nil && c.byID[b.rec.ID] == b {
		delete(c.byID, b.rec.ID)
	}
	if r == nil || b.hist != nil && b.hist.recordID != r.ID {
		b.hist = nil // the record's history goes with it
	}
	c.quota.count(b.rec, -1)
	if r != nil && r.Max <= 0 {
		d := withDefaultMax(*r)
		r = &d
	}
	b.rec = r
	c.quota.count(r, +1)
	if r != nil {
		c.byID[r.ID] = b
		b.host = hostOf(r.URL)
	}
	// A decision queued for a record that is gone or disarmed is dropped
	// now, so that the visitors held on it take the fallback chain at
	// once rather than when its slot would have come.
	if q := b.queued; q != nil {
		switch {
		case r == nil:
			c.dropLocked(q, ErrNoRecord, "record deleted")
		case r.Disarmed:
			c.dropLocked(q, ErrDisarmed, "record disarmed")
		}
	}
}

// applyLocked takes r as b's record, from the store. rearm says the write
// re-armed it; a record found re-armed by someone else counts too. Either
// way the backoff of past failures is forgotten (the cooldown since the
// last call still holds) and a failed cold start is no longer answered.
func (c *Controller) applyLocked(b *bind, r Record, rearm bool) {
	old := b.rec
	c.setRecLocked(b, &r)
	if rearm || (old != nil && old.Disarmed && !r.Disarmed) {
		b.retry = nil
		b.nextAllowed = time.Time{}
		if !b.lastCallEnd.IsZero() {
			b.nextAllowed = b.lastCallEnd.Add(r.Cooldown)
		}
		if b.start != nil && b.start.resolved && b.start.err != nil {
			b.start = nil
		}
	}
	c.honourLocked(b, &r, c.now())
}

// honourLocked takes the call state r carries, whichever server (or an
// earlier run of this one) stored it: no call before its NextCallAt, none
// to its provider before its PenaltyUntil, and a cold start accepted less
// than cold_start ago, whose pool this server has not seen routable since,
// is a flight later requests join, as if this server had made the call. It only ever delays: a later state this controller
// holds wins.
func (c *Controller) honourLocked(b *bind, r *Record, now time.Time) {
	// r's times are the store's clock: each is converted to this
	// server's before it meets now or this server's own state.
	if r.NextCallAt != nil {
		if t := c.localLocked(*r.NextCallAt); t.After(b.nextAllowed) {
			b.nextAllowed = t
		}
	}
	if r.LastCallAt != nil {
		if t := c.localLocked(*r.LastCallAt); t.After(b.lastCallEnd) {
			b.lastCallEnd = t
		}
	}
	if r.PenaltyUntil != nil {
		if t := c.localLocked(*r.PenaltyUntil); t.After(now) {
			h := c.hosts[b.host]
			if h == nil {
				h = &hostState{}
				c.hosts[b.host] = h
			}
			if t.After(h.retryUntil) {
				h.retryUntil = t
			}
		}
	}
	storeNow := c.storeTimeLocked(now)
	if at := c.localLocked(acceptedColdStart(r, storeNow, c.storeTimeLocked(b.routableAt))); !at.IsZero() && (b.start == nil || b.start.resolved && b.start.succeededAt.Before(at)) {
		s := newStart()
		s.resolveAtLocked(nil, at)
		b.start = s
	} else if b.start == nil && r.ConsecutiveFailures > 0 && r.LastCallAt != nil && r.LastReason == string(ReasonColdStart) &&
		b.nextAllowed.After(now) {
		// A failed cold start whose backoff runs, not re-armed since:
		// requests take the fallback chain at once, as they would on the
		// server that made it.
		s := newStart()
		s.resolveAtLocked(recordedCallError(r), now)
		b.start = s
	}
	// A cold start waiting for another server's call ends with that
	// call, once the store has it.
	if it := b.queued; it != nil && it.leased && r.LastCallAt != nil && !c.localLocked(*r.LastCallAt).Before(it.since) {
		if p := planLease(leaseIn{reason: it.d.reason, rec: *r, since: c.storeTimeLocked(it.since), now: storeNow, routable: c.storeTimeLocked(b.routableAt)}); p.wait.IsZero() {
			c.settleLocked(it, c.localPlanLocked(p))
		}
	}
}

// recordedCallError is the error of r's last call, a failed one, as the
// store recorded it.
func recordedCallError(r *Record) *CallError {
	ce := &CallError{Status: r.LastStatus}
	if r.LastStatus == 0 {
		ce.Err = errors.New(cmp.Or(r.LastError, "no response"))
	}
	return ce
}

// acceptedColdStart returns when r's last call, a cold start or a scale
// out the provider accepted, was made, if that was less than r's
// cold_start ago; zero otherwise. A scale out counts: another server saw
// instances and asked for more, so a server whose own pool is empty (it
// has just restarted, its clients not reconnected yet) waits for them
// instead of calling a cold start whose desired capacity would be lower
// than what runs.
//
// routable is when this server last saw the pool routable, on the same
// clock as now (zero: not since it started). A call the pool was routable
// after is over, whatever its age: its instances came, and the pool is
// empty again because they left (retired idle, or died). Joining it would
// hold requests for an instance nobody is starting, for the rest of
// cold_start.
func acceptedColdStart(r *Record, now, routable time.Time) time.Time {
	if r.LastCallAt == nil || (r.LastReason != string(ReasonColdStart) && r.LastReason != string(ReasonScaleOut)) || r.LastStatus < 200 || r.LastStatus > 299 ||
		now.Sub(*r.LastCallAt) >= r.ColdStart || routable.After(*r.LastCallAt) {
		return time.Time{}
	}
	return *r.LastCallAt
}

// hostOf returns the provider host (host[:port], lowercased) of a hook URL.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.ToLower(u.Host)
}

// signal wakes the dispatcher.
func (c *Controller) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start is one cold start flight: every request that finds the same empty
// pool while it is pending shares it. It is safe for concurrent use.
type Start struct {
	done   chan struct{}
	failed chan struct{}
	err    error // written once, before failed is closed

	resolved bool // owned by the controller's owner goroutine
	// succeededAt is when the call was accepted (zero until then, or after
	// a failure); owned by the controller's owner goroutine.
	succeededAt time.Time
	// served is set once the pool was seen routable after the call was
	// accepted: the instance came. Should the pool be empty again, the
	// next request makes a new call (within the cooldown) rather than
	// wait for an instance that came and went. Owned by the controller's owner goroutine.
	served bool
	// parent is the span of the request that asked for the cold start
	// (invalid when tracing is off): the hook call's span joins its trace.
	// Set before the flight is published, never changed.
	parent trace.SpanContext
}

func newStart() *Start {
	return &Start{done: make(chan struct{}), failed: make(chan struct{})}
}

// Done is closed once the flight is over: the provider accepted the call,
// the call failed (Failed is closed too), or the pool became routable
// before the call was made. Held requests are released by the router when
// an instance announces, not by Done.
func (s *Start) Done() <-chan struct{} { return s.done }

// Failed is closed if the flight failed: the call failed, or the record
// was disarmed or deleted, or the controller stopped, before it was made.
// Held requests then take the fallback chain at once.
func (s *Start) Failed() <-chan struct{} { return s.failed }

// Err returns why the flight failed (a *CallError, ErrDisarmed,
// ErrNoRecord, ErrQueueFull or ErrClosed), or nil while it has not.
func (s *Start) Err() error {
	select {
	case <-s.failed:
		return s.err
	default:
		return nil
	}
}

// resolveAtLocked ends the flight: a success accepted at when err is nil.
func (s *Start) resolveAtLocked(err error, at time.Time) {
	if s.resolved {
		return
	}
	s.resolved = true
	if err != nil {
		s.err = err
		close(s.failed)
	} else {
		s.succeededAt = at
	}
	close(s.done)
}

// ColdStart is called by the router when a request finds the pool of
// (orgID, hostname, path) empty; orgID "" means the organization that
// declared the bind most recently. The router checks maintenance mode and
// the visitor's allowed_ips first: ColdStart does not.
//
// It returns the bind's flight, starting one (a cold_start call queued for
// a slot at once) unless one is pending, or the last one is still inside
// its cooldown (success) or backoff (failure, so Failed is already
// closed). A burst of any size therefore makes one call. It returns
// ErrNoRecord without a record, ErrDisarmed for a disarmed one, ErrQueueFull
// when no decision can be queued, and ErrClosed after Run returned. It
// blocks only until Run's first load of records is done, or ctx ends.
func (c *Controller) ColdStart(ctx context.Context, orgID, hostname, path string) (*Start, error) {
	if err := c.awaitLoaded(ctx); err != nil {
		return nil, err
	}
	// One request to the owner for a bind it knows; for one it does not,
	// the store is read (learn) and the owner asked again.
	var (
		s       *Start
		err     error
		unknown bool   // the first request found no record
		mark    uint64 // Controller.writes when it did
	)
	decide := func() {
		if !unknown && !c.closed && c.lookupLocked(orgID, hostname, path) == nil {
			unknown, mark = true, c.writes
			return
		}
		s, err = c.coldStartLocked(ctx, orgID, hostname, path)
	}
	if derr := c.do(ctx, decide); derr != nil {
		return nil, derr
	}
	if unknown {
		c.learn(ctx, orgID, hostname, path, mark)
		if derr := c.do(ctx, decide); derr != nil {
			return nil, derr
		}
	}
	return s, err
}

// coldStartLocked is ColdStart's decision, on the owner.
func (c *Controller) coldStartLocked(ctx context.Context, orgID, hostname, path string) (*Start, error) {
	b, p := c.planColdStartLocked(orgID, hostname, path, c.now())
	switch {
	case errors.Is(p.Err, ErrQueueFull):
		c.rejectLocked(b, ReasonColdStart)
		c.repeatLocked(b, c.now(), apitype.ScalingActionColdStart, whyColdStart, apitype.ScalingOutcomeRefused, 0, coldStartDesired(b.rec), nil)
		return nil, p.Err
	case p.Err != nil:
		return nil, p.Err
	case p.Join:
		return b.start, nil
	}
	s := newStart()
	s.parent = trace.SpanContextFromContext(ctx)
	d := b.decisionLocked(ReasonColdStart, 0, p.desired, samples{})
	now := c.now()
	if p.replace {
		c.endNoteLocked(b, b.queued.note, now, apitype.ScalingOutcomeDropped, 0, whyReplacedByCS, false)
		b.queued.d, b.queued.start = d, s
	} else if err := c.enqueueLocked(b, d, s); err != nil {
		c.repeatLocked(b, now, apitype.ScalingActionColdStart, whyColdStart, apitype.ScalingOutcomeRefused, 0, d.desired, nil)
		return nil, err
	}
	b.queued.note = c.noteLocked(b, now, apitype.ScalingActionColdStart, whyColdStart, apitype.ScalingOutcomePending, 0, d.desired, nil)
	b.start = s
	return s, nil
}

// learnTimeout bounds the store read of learn.
const learnTimeout = 2 * time.Second

// learn reads the record of a bind the controller does not know from the
// store, and takes it as a reload would. The caller (the router) asks for
// a cold start only of a bind it holds armed, and it arms a record
// another server created through the store's change feed, as this
// controller learns of it; whichever of the two reloads lands first, a
// visitor held in between still cold starts the bind rather than waiting
// for a client nobody calls. Concurrent callers for one bind share one
// read; a failed read is left to the next reload. mark is
// Controller.writes when the owner found no record for the bind.
func (c *Controller) learn(ctx context.Context, orgID, hostname, path string, mark uint64) {
	key := orgID + "\x00" + hostname + "\x00" + path
	v, _, _ := c.learning.Do(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), learnTimeout)
		defer cancel()
		r, err := c.store.ScalingRecordByBind(ctx, orgID, hostname, path)
		if err != nil {
			return nil, err
		}
		return &r, nil
	})
	r, _ := v.(*Record)
	if r == nil || orgID != "" && r.OrgID != orgID {
		return
	}
	// Failing, the read is left to the next reload as well.
	_ = c.do(context.WithoutCancel(ctx), func() { c.learnedLocked(r, mark) })
}

// learnedLocked takes r, read by learn since write mark, as a reload
// would.
func (c *Controller) learnedLocked(r *Record, mark uint64) {
	k := bindKey{r.OrgID, r.Hostname, r.Path}
	b := c.binds[k]
	// The rule of refresh against stale reads: a bind written, or with a
	// record, since the read began keeps what it holds.
	if b != nil && (b.rec != nil || b.landed > mark || b.writing > 0 || b.running != nil) {
		return
	}
	if b == nil {
		b = c.newBindLocked(k)
	}
	c.applyLocked(b, *r, false)
	c.log.Info("scaling record learned at a cold start", logkey.OrgID, r.OrgID, logkey.Hostname, r.Hostname,
		logkey.Path, r.Path, logkey.RecordID, r.ID)
}

// awaitLoaded waits for Run's first load of the records. It returns
// ErrClosed once Run has returned, or ctx's error.
func (c *Controller) awaitLoaded(ctx context.Context) error {
	select {
	case <-c.loaded:
		return nil
	case <-c.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// planColdStartLocked looks up the bind of (orgID, hostname, path) and
// plans a cold start of it at now (planColdStart). The bind is nil when
// there is no record, or after Run returned.
func (c *Controller) planColdStartLocked(orgID, hostname, path string, now time.Time) (*bind, coldStartPlan) {
	if c.closed {
		return nil, coldStartPlan{ColdStartPlan: ColdStartPlan{Err: ErrClosed}}
	}
	in := coldStartIn{queueFull: len(c.queue) >= c.cfg.MaxQueued, now: now}
	b := c.lookupLocked(orgID, hostname, path)
	if b != nil {
		in.rec, in.nextAllowed, in.queued = b.rec, b.nextAllowed, b.queued != nil
		if s := b.start; s != nil {
			in.flight = flightState{exists: true, pending: !s.resolved, acceptedAt: s.succeededAt, served: s.served}
		}
	}
	return b, planColdStart(in)
}

// coldStartIn is what planColdStart reads of one bind.
type coldStartIn struct {
	// rec is the bind's record; nil when there is none.
	rec *Record
	// flight is the bind's latest cold start flight.
	flight flightState
	// nextAllowed ends the bind's cooldown or backoff.
	nextAllowed time.Time
	// queued is set when a decision of the bind waits for a call slot.
	queued bool
	// queueFull is set when the call queue holds Config.MaxQueued
	// decisions.
	queueFull bool
	now       time.Time
}

// flightState is what planning reads of a cold start flight.
type flightState struct {
	exists  bool // there has been a flight
	pending bool // its call is not over
	// acceptedAt is when the provider accepted its call; zero until then,
	// or after a failure.
	acceptedAt time.Time
	// served is set once the pool was routable after the call was
	// accepted.
	served bool
}

// coldStartPlan is what planColdStart decides: what PlanColdStart reports
// and, when a call is to be made, how it is queued.
type coldStartPlan struct {
	ColdStartPlan
	// desired is the call's desired capacity, when neither Join nor Err
	// is set.
	desired int
	// replace is set when the call takes the place of the bind's waiting
	// sampled decision rather than joining the queue: the empty pool makes
	// that decision moot.
	replace bool
}

// planColdStart decides what a request that finds the bind's pool empty
// does. It reads no clock and changes nothing.
//
// A disarmed record refuses. Requests join the bind's flight while its
// call is pending, inside its cooldown or backoff, and, once accepted, for
// the cold_start budget: the instance it asked for is on its way, and a
// burst that takes longer than the cooldown to arrive must not ask again.
// A flight whose instance came (served) is over: the pool is empty again,
// so the instance died, and a new call is queued; it waits out the
// cooldown in the queue. Otherwise a call is made, unless the queue is
// full and the bind has no decision waiting whose place it can take.
func planColdStart(in coldStartIn) coldStartPlan {
	r := in.rec
	if r == nil {
		return coldStartPlan{ColdStartPlan: ColdStartPlan{Err: ErrNoRecord}}
	}
	p := coldStartPlan{ColdStartPlan: ColdStartPlan{ConsecutiveFailures: r.ConsecutiveFailures}}
	if in.now.Before(in.nextAllowed) {
		p.NextAllowed = in.nextAllowed
	}
	f := in.flight
	switch {
	case r.Disarmed:
		p.Err = ErrDisarmed
	case f.exists && (f.pending || !f.served && (in.now.Before(in.nextAllowed) ||
		!f.acceptedAt.IsZero() && in.now.Sub(f.acceptedAt) < r.ColdStart)):
		p.Join = true
	case in.queued:
		p.desired, p.replace = coldStartDesired(r), true
	case in.queueFull:
		p.Err = ErrQueueFull
	default:
		p.desired = coldStartDesired(r)
	}
	return p
}

// ColdStartPlan is what ColdStart would do for a bind now: what
// PlanColdStart reports.
type ColdStartPlan struct {
	// Join is set when a request would join a cold start already under
	// way (its call pending, inside its cooldown or backoff, or accepted
	// less than cold_start ago) rather than make a call.
	Join bool
	// Err is why ColdStart would refuse (ErrNoRecord, ErrDisarmed,
	// ErrQueueFull, ErrClosed, or ctx's error); nil when it would call or
	// join.
	Err error
	// NextAllowed is when the bind's cooldown or backoff ends; zero when
	// none runs.
	NextAllowed time.Time
	// ConsecutiveFailures is the breaker's count of failed calls.
	ConsecutiveFailures int
}

// PlanColdStart reports what ColdStart(ctx, orgID, hostname, path) would
// do now, without doing it: no call is queued, no flight started, no
// counter moved. Both decide with planColdStart. Like ColdStart it first
// waits, until ctx ends, for Run's first load of the records. It is safe
// for concurrent use.
func (c *Controller) PlanColdStart(ctx context.Context, orgID, hostname, path string) ColdStartPlan {
	if err := c.awaitLoaded(ctx); err != nil {
		return ColdStartPlan{Err: err}
	}
	var p coldStartPlan
	if err := c.do(ctx, func() { _, p = c.planColdStartLocked(orgID, hostname, path, c.now()) }); err != nil {
		return ColdStartPlan{Err: err}
	}
	return p.ColdStartPlan
}

// Metrics are the controller's counters and gauges, for the metrics
// endpoint.
type Metrics struct {
	// InFlight is the number of calls in flight now (at most MaxInFlight).
	InFlight int
	// Queued is the number of decisions waiting for a call slot now.
	Queued int
	// Calls counts calls made; Failures those that failed.
	Calls, Failures uint64
	// Disarms counts records the breaker disarmed.
	Disarms uint64
	// QueueRejected counts decisions refused because the queue was full.
	QueueRejected uint64
	// Dropped counts queued decisions dropped on re-evaluation (the pool
	// or the record changed while they waited) or at shutdown.
	Dropped uint64
	// DecisionsDropped counts decisions Config.OnDecision was not told
	// of: its buffer was full.
	DecisionsDropped uint64
}

// Metrics returns the current figures; once the controller has stopped,
// the figures it stopped with. It waits only for the owner's reply.
func (c *Controller) Metrics() Metrics {
	var m Metrics
	if err := c.do(context.Background(), func() { m = c.metricsLocked() }); errors.Is(err, ErrClosed) {
		return c.final // written before the owner stopped, read after
	}
	return m
}

// metricsLocked returns the current figures.
func (c *Controller) metricsLocked() Metrics {
	m := c.metrics
	m.InFlight = c.inflight
	m.Queued = len(c.queue)
	return m
}

// refreshLoop reloads the records periodically and on request.
func (c *Controller) refreshLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.reload:
		}
		c.refresh(ctx)
	}
}

// changeLoop asks for a reload when another server creates a record this
// controller does not know, deletes one, disarms one (its breaker tripped
// there), or records a call (its cooldown holds here too), so that no
// server keeps calling a hook another has given up on or just called. Other updates of known records (every heartbeat moves one) wait
// for the periodic reload.
func (c *Controller) changeLoop(ctx context.Context, changes <-chan store.Change) {
	for {
		var ch store.Change
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ch, ok = <-changes:
			if !ok {
				return
			}
		}
		switch ch.Kind {
		case store.ChangeScalingCalled:
			// Another server's call ended and released its lease: a
			// decision waiting on that lease tries again now, and the
			// reload brings the call's cooldown to every bind.
			c.leaseReleased(ctx, ch.ID)
		case store.ChangeScalingUpdated:
			// An update of a record this server holds disarmed may be
			// its re-arming by a client of another server: reload, or
			// cold starts stay refused until the periodic reload.
			var known bool
			if c.do(ctx, func() {
				b := c.byID[ch.ID]
				known = b != nil && (b.rec == nil || !b.rec.Disarmed)
			}) != nil || known {
				continue
			}
		case store.ChangeScalingDeleted, store.ChangeScalingDisarmed, store.ChangeResync:
		default:
			continue
		}
		c.signalReload()
	}
}

// landLocked marks a write of b's record as landed (or its record as
// forgotten): a reload whose list was read before now leaves b alone.
func (c *Controller) landLocked(b *bind) {
	c.writes++
	b.landed = c.writes
}

// refresh reloads every record from the store and applies what
// planReload keeps of the list.
//
// The rule against stale lists: a bind with a write of its record in
// progress, a call in flight, or a write landed since the list was read
// keeps what it holds; whatever the write stored, the controller applies
// itself when it lands.
func (c *Controller) refresh(ctx context.Context) {
	c.measureClock(ctx)
	var mark uint64
	if c.do(ctx, func() { mark = c.writes }) != nil {
		return
	}

	recs, err := c.store.ListScalingRecords(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("scaling records not reloaded", logkey.Err, err)
		}
		return
	}
	// Not taken when ctx ended: the controller is stopping.
	_ = c.do(ctx, func() { c.reloadLocked(recs, mark) })
}

// reloadLocked applies what planReload keeps of recs, listed since write
// mark.
func (c *Controller) reloadLocked(recs []Record, mark uint64) {
	known := make(map[bindKey]bindStatus, len(c.binds))
	for k, b := range c.binds {
		known[k] = bindStatus{
			hasRecord: b.rec != nil,
			untouched: b.landed <= mark && b.writing == 0 && b.running == nil,
		}
	}
	p := planReload(recs, known)
	for _, r := range p.apply {
		k := bindKey{r.OrgID, r.Hostname, r.Path}
		b := c.binds[k]
		if b == nil {
			b = c.newBindLocked(k)
		}
		c.applyLocked(b, r, false)
	}
	for _, k := range p.clear {
		b := c.binds[k]
		c.setRecLocked(b, nil)
		c.gcLocked(b)
	}
}

// bindStatus is what planReload reads of a bind the controller knows.
type bindStatus struct {
	// hasRecord is set when the bind holds a record.
	hasRecord bool
	// untouched is set when nothing wrote the bind's record while the
	// list was read (no write began or ended, none is in progress, no
	// call is in flight): the list is then not older than the bind.
	untouched bool
}

// reloadPlan is what a reload changes.
type reloadPlan struct {
	// apply are the listed records to take, in list order; a bind the
	// controller does not know is created for them.
	apply []Record
	// clear are the binds whose record is gone from the store.
	clear []bindKey
}

// planReload decides what a list of every record, read from the store,
// changes of the binds known. It reads no clock and changes nothing.
//
// A bind written while the list was read keeps what it holds, listed or
// not: the list may be older than its record, and a reload must never
// overwrite a newer state with an older one. Every other listed record is
// taken, and every other record missing from the list is gone.
func planReload(listed []Record, known map[bindKey]bindStatus) reloadPlan {
	var p reloadPlan
	seen := make(map[bindKey]bool, len(listed))
	for _, r := range listed {
		k := bindKey{r.OrgID, r.Hostname, r.Path}
		dup := seen[k]
		seen[k] = true
		// A bind the list itself creates is new to the reload: a second
		// record for it is not taken.
		if st, ok := known[k]; ok && !st.untouched || !ok && dup {
			continue
		}
		p.apply = append(p.apply, r)
	}
	for k, st := range known {
		if !seen[k] && st.hasRecord && st.untouched {
			p.clear = append(p.clear, k)
		}
	}
	return p
}
