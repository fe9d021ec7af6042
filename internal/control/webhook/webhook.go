// Package webhook owns the delivery of server events to the HTTP endpoints
// organizations subscribe: the JSON payload and its Slack and Discord
// formats, its signatures (the Standard Webhooks webhook-signature, and the
// older X-Aperio-Signature), the bounded queues between the emitter and the
// network (one for fan-out, one per subscription, so that a slow receiver
// holds up only its own deliveries), the short-lived cache of each
// organization's subscriptions, the retries with backoff, the record of
// each attempt in a delivery log, and test deliveries and redeliveries sent
// on request. Every delivery goes out through the outbound fence.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
)

// Headers every delivery carries.
const (
	// HeaderEvent carries the event type, such as "scaling_failed".
	HeaderEvent = "X-Aperio-Event"
	// HeaderDelivery carries the delivery's unique id: the same for every
	// attempt of one delivery, so receivers can drop repeats.
	HeaderDelivery = "X-Aperio-Delivery"
	// HeaderSignature carries "sha256=" and the lowercase hex HMAC-SHA256
	// of the exact request body, keyed with the subscription's secret. It
	// is absent when the subscription has no secret.
	HeaderSignature = "X-Aperio-Signature"
	// HeaderTimestamp carries the attempt's send time in Unix seconds.
	HeaderTimestamp = "X-Aperio-Timestamp"
)

// Defaults and limits.
const (
	// DefaultMaxQueue is the default bound on events waiting for fan-out.
	DefaultMaxQueue = 1000
	// DefaultSubscriptionQueue is the default bound on the deliveries
	// waiting for one subscription.
	DefaultSubscriptionQueue = 100
	// DefaultWorkers is the default number of concurrent deliveries to
	// one subscription: one, so that a receiver sees its events in order.
	DefaultWorkers = 1
	// MaxWorkers bounds Config.Workers: a receiver is never sent more
	// than two deliveries at once.
	MaxWorkers = 2
	// CacheTTL is how long an organization's subscriptions are reused
	// before they are read from the store again. Invalidate drops them at
	// once on the server that changed them; another server sharing the
	// database sees a new or deleted subscription within CacheTTL (the
	// store has no change notification for webhooks).
	CacheTTL = 5 * time.Second
	// lookupTimeout bounds one read of the subscriptions.
	lookupTimeout = 5 * time.Second
	// idleWorker is how long a subscription's worker waits for a delivery
	// before it exits; the next delivery starts it again.
	idleWorker = time.Minute
	// MaxAttempts is how many times one delivery is tried before it is
	// given up.
	MaxAttempts = 5
	// MaxBackoff caps the wait between two attempts.
	MaxBackoff = time.Minute
)

// Subscription is one organization's webhook: where events go (URL,
// checked by the fence on every attempt), which ones (Events; an event not
// listed is not delivered) and the Secret that keys the signature ("" sends
// no X-Aperio-Signature; never logged). Logs name it by ID only, since a
// URL's path can be a credential. It is an alias of the store's type, so
// *store.DB is a Lister as it is.
type Subscription = store.Webhook

// Lister finds the subscriptions an event goes to. WebhooksFor returns the
// subscriptions of orgID that list event; it must be safe for concurrent
// use. *store.DB implements it.
type Lister interface {
	WebhooksFor(ctx context.Context, orgID, event string) ([]Subscription, error)
}

// Config configures a Dispatcher. The zero value of each optional field is
// its default.
type Config struct {
	// Subscriptions finds where each event goes. Required.
	Subscriptions Lister
	// Client makes the calls under the outbound policy shared with the
	// scaling hooks. Required.
	Client *outbound.Client
	// Logger receives deliveries given up, dropped events and lookup
	// failures at Warn, successful deliveries at Debug; nil discards them.
	Logger *slog.Logger
	// MaxQueue bounds the events waiting for fan-out; 0 means
	// DefaultMaxQueue. Publish (and Emit, EmitMaintenance) drops an event
	// that finds it full.
	MaxQueue int
	// SubscriptionQueue bounds the deliveries waiting for one
	// subscription; 0 means DefaultSubscriptionQueue. A delivery that
	// finds its subscription's queue full is dropped and counted, so a
	// receiver that hangs never holds up another's deliveries.
	SubscriptionQueue int
	// Workers is how many deliveries to one subscription run at once,
	// 1 to MaxWorkers; 0 means DefaultWorkers. A worker is busy for the
	// whole of a delivery, its waits between attempts included.
	Workers int
	// Now is the clock of the subscription cache; nil means time.Now.
	Now func() time.Time
	// Backoff returns the wait after the attempt-th failed attempt
	// (1-based); nil means DefaultBackoff. Tests pass tiny durations.
	Backoff func(attempt int) time.Duration
	// Deliveries keeps the outcome of every attempt; nil keeps none.
	// Writes go through a queue bounded by MaxQueue, so that a slow or
	// failing store never holds up a delivery.
	Deliveries DeliveryLog
	// KeepDeliveries is how many deliveries of each subscription the log
	// keeps; 0 means store.DefaultDeliveryKeep, at most
	// store.MaxDeliveryKeep.
	KeepDeliveries int
}

// withDefaults fills the zero fields that have a default.
func (cfg Config) withDefaults() Config {
	def := DefaultConfig()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = def.MaxQueue
	}
	if cfg.SubscriptionQueue == 0 {
		cfg.SubscriptionQueue = def.SubscriptionQueue
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Workers == 0 {
		cfg.Workers = def.Workers
	}
	if cfg.Backoff == nil {
		cfg.Backoff = def.Backoff
	}
	return cfg
}

// DefaultConfig returns the default delivery settings: DefaultMaxQueue,
// DefaultSubscriptionQueue, DefaultWorkers and DefaultBackoff.
// Subscriptions, Client, Logger and Now are nil.
func DefaultConfig() Config {
	return Config{MaxQueue: DefaultMaxQueue, SubscriptionQueue: DefaultSubscriptionQueue, Workers: DefaultWorkers, Backoff: DefaultBackoff}
}

// Validate reports every problem with cfg's settings; the required
// Subscriptions and Client, which New checks, are not settings.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MaxQueue < 0 {
		errs = append(errs, fmt.Errorf("webhook: max queue %d is negative", cfg.MaxQueue))
	}
	if cfg.SubscriptionQueue < 0 {
		errs = append(errs, fmt.Errorf("webhook: subscription queue %d is negative", cfg.SubscriptionQueue))
	}
	if cfg.Workers < 0 || cfg.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("webhook: workers %d is not between 1 and %d", cfg.Workers, MaxWorkers))
	}
	if cfg.KeepDeliveries < 0 || cfg.KeepDeliveries > store.MaxDeliveryKeep {
		errs = append(errs, fmt.Errorf("webhook: keep deliveries %d, want 0 to %d", cfg.KeepDeliveries, store.MaxDeliveryKeep))
	}
	return errors.Join(errs...)
}

// DefaultBackoff doubles the wait from one second after each failed
// attempt (1 s, 2 s, 4 s, ...), capped at MaxBackoff.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 7 { // 1s<<6 already exceeds the cap; avoid overflow
		return MaxBackoff
	}
	return min(time.Second<<(attempt-1), MaxBackoff)
}

// delivery is one event going to one subscription.
type delivery struct {
	id    string
	sub   Subscription
	event string
	body  []byte
}

// queued is an event waiting to be fanned out: a scaling event, (maint
// set) a maintenance event, or (ev set) any other.
type queued struct {
	typ, orgID string
	scaling    *events.Scaling
	maint      *MaintenanceEvent
	ev         *events.Event
}

// payload encodes q as a delivery body.
func (q *queued) payload() ([]byte, error) {
	switch {
	case q.maint != nil:
		return marshalMaintenance(*q.maint)
	case q.ev != nil:
		return marshalEvent(*q.ev)
	}
	return marshalPayload(*q.scaling)
}

// Dispatcher delivers events to webhooks. Publish, Emit and
// EmitMaintenance queue; Run delivers. It is safe for concurrent use.
// Create it with New.
type Dispatcher struct {
	cfg     Config
	log     *slog.Logger
	events  chan queued // bounded by MaxQueue; Publish drops when full
	started atomic.Bool
	dropped atomic.Int64 // events and deliveries dropped, both queues
	// subDropped counts the deliveries dropped on a full subscription
	// queue (also in dropped).
	subDropped atomic.Int64
	// dropping is set by the first drop of an overflow and cleared by the
	// next event queued, so that each overflow is logged once.
	dropping atomic.Bool
	cache    subCache
	wg       sync.WaitGroup // Run's goroutines: fanLoop and the workers

	// records queues delivery log writes for recordLoop; bounded by
	// MaxQueue, record drops when full.
	records        chan *Delivery
	recordsDropped atomic.Int64

	mu   sync.Mutex           // guards the following fields
	subs map[string]*subQueue // by subscription ID; workers remove their own when idle
}

// subQueue is one subscription's deliveries, with the count of its
// running workers.
type subQueue struct {
	id      string
	work    chan delivery // bounded by SubscriptionQueue; fanLoop drops when full
	workers int           // guarded by Dispatcher.mu
	// dropping is set by the first drop of an overflow and cleared by the
	// next delivery queued, so that each overflow is logged once.
	dropping bool // guarded by Dispatcher.mu
}

// New returns a Dispatcher, or every problem of cfg: a missing
// Subscriptions or Client, and the errors of cfg.Validate.
func New(cfg Config) (*Dispatcher, error) {
	var errs []error
	if cfg.Subscriptions == nil {
		errs = append(errs, errors.New("webhook: no subscription lister"))
	}
	if cfg.Client == nil {
		errs = append(errs, errors.New("webhook: no fence client"))
	}
	if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Dispatcher{
		cfg:     cfg,
		log:     cfg.Logger,
		events:  make(chan queued, cfg.MaxQueue),
		cache:   subCache{ttl: CacheTTL, now: cfg.Now, orgs: make(map[string]*orgSubs)},
		subs:    make(map[string]*subQueue),
		records: make(chan *Delivery, cfg.MaxQueue),
	}, nil
}

// Emit queues e for delivery to every subscription of e.OrgID that lists
// e.Type. It never blocks: when the queue is full the event is dropped,
// counted in Dropped and logged once per overflow. Events queued while Run
// is not running wait for it; those still queued when Run returns are not
// delivered.
func (d *Dispatcher) Emit(_ context.Context, e events.Scaling) {
	d.enqueue(queued{typ: e.Type, orgID: e.OrgID, scaling: &e})
}

// EmitMaintenance queues e for delivery to every subscription of e.OrgID
// that lists e.Type, like Emit: it never blocks, and drops the event when
// the queue is full.
func (d *Dispatcher) EmitMaintenance(_ context.Context, e MaintenanceEvent) {
	d.enqueue(queued{typ: e.Type, orgID: e.OrgID, maint: &e})
}

// Publish queues e for delivery to every subscription of e.OrgID that
// lists e.Kind, like Emit: it never blocks, and drops the event when the
// queue is full. An e.Data of type events.Scaling or MaintenanceEvent is
// delivered with that kind's payload, anything else with the generic one
// (see EventPayload). Publish implements events.Sink.
func (d *Dispatcher) Publish(e events.Event) {
	switch data := e.Data.(type) {
	case events.Scaling:
		d.enqueue(queued{typ: e.Kind, orgID: e.OrgID, scaling: &data})
	case MaintenanceEvent:
		d.enqueue(queued{typ: e.Kind, orgID: e.OrgID, maint: &data})
	default:
		d.enqueue(queued{typ: e.Kind, orgID: e.OrgID, ev: &e})
	}
}

// Invalidate forgets the cached subscriptions of orgID, so that the next
// event of orgID reads them from the store: call it after creating or
// deleting one of its webhooks. It never blocks on a lookup.
func (d *Dispatcher) Invalidate(orgID string) { d.cache.invalidate(orgID) }

func (d *Dispatcher) enqueue(q queued) {
	select {
	case d.events <- q:
		d.dropping.Store(false)
	default:
		n := d.dropped.Add(1)
		if !d.dropping.Swap(true) {
			d.log.Warn("webhook queue full, dropping events",
				logkey.Event, q.typ, logkey.OrgID, q.orgID, logkey.Dropped, n)
		}
	}
}

// Dropped returns how many events Publish, Emit and EmitMaintenance have
// dropped because the fan-out queue was full, plus how many deliveries were
// dropped because their subscription's queue was full, since New.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// SubscriptionDropped returns how many deliveries were dropped because
// their subscription's queue was full (a receiver slower than its
// events), since New. They are counted in Dropped too.
func (d *Dispatcher) SubscriptionDropped() int64 { return d.subDropped.Load() }

// Run delivers queued events until ctx is done, then abandons deliveries
// in progress, waits for its goroutines to exit and returns nil. It may be
// called once; a second call returns an error.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.started.Swap(true) {
		return errors.New("webhook: Run called twice")
	}
	d.wg.Go(func() { d.fanLoop(ctx) })
	if d.cfg.Deliveries != nil {
		d.wg.Go(func() { d.recordLoop(ctx) })
	}
	d.wg.Wait()
	return nil
}

// fanLoop turns each event into one delivery per subscription, each put
// in its subscription's queue without waiting: a full queue drops the
// delivery. It never waits for a receiver, so one that hangs delays only
// its own deliveries.
func (d *Dispatcher) fanLoop(ctx context.Context) {
	for {
		var e queued
		select {
		case <-ctx.Done():
			return
		case e = <-d.events:
		}
		subs, err := d.subscriptions(ctx, e.orgID, e.typ)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("webhook lookup failed, event not delivered",
					logkey.Event, e.typ, logkey.OrgID, e.orgID, logkey.Err, err)
			}
			continue
		}
		var body []byte
		for _, s := range subs {
			if s.OrgID != e.orgID || !slices.Contains(s.Events, e.typ) {
				continue // the lister's job, checked again: never cross orgs
			}
			if body == nil {
				if body, err = e.payload(); err != nil {
					d.log.Warn("webhook payload encoding failed", logkey.Event, e.typ, logkey.Err, err)
					break
				}
			}
			d.queue(ctx, delivery{id: newDeliveryID(), sub: s, event: e.typ, body: body})
		}
	}
}

// subscriptions returns the subscriptions of orgID that list event, from
// the cache when it has them, else from the Lister (bounded by
// lookupTimeout), cached for CacheTTL.
func (d *Dispatcher) subscriptions(ctx context.Context, orgID, event string) ([]Subscription, error) {
	subs, gen, ok := d.cache.get(orgID, event)
	if ok {
		return subs, nil
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	subs, err := d.cfg.Subscriptions.WebhooksFor(lctx, orgID, event)
	if err != nil {
		return nil, err
	}
	d.cache.put(orgID, event, gen, subs)
	return subs, nil
}

// queue puts dl in its subscription's queue, starting the subscription's
// workers if they are not all running; it drops dl, counted, when the
// queue is full. It never blocks.
func (d *Dispatcher) queue(ctx context.Context, dl delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.subs[dl.sub.ID]
	if q == nil {
		q = &subQueue{id: dl.sub.ID, work: make(chan delivery, d.cfg.SubscriptionQueue)}
		d.subs[dl.sub.ID] = q
	}
	for q.workers < d.cfg.Workers {
		q.workers++
		d.wg.Go(func() { d.deliverLoop(ctx, q) })
	}
	select {
	case q.work <- dl:
		q.dropping = false
	default:
		d.subDropped.Add(1)
		n := d.dropped.Add(1)
		if !q.dropping {
			q.dropping = true
			d.log.Warn("webhook subscription queue full, dropping deliveries",
				logkey.Event, dl.event, logkey.OrgID, dl.sub.OrgID, logkey.WebhookID, dl.sub.ID, logkey.Dropped, n)
		}
	}
}

// deliverLoop runs q's deliveries one at a time until ctx is done, or
// until it has waited idleWorker for one with the queue empty: then it
// exits, and the subscription's next delivery starts a worker again.
func (d *Dispatcher) deliverLoop(ctx context.Context, q *subQueue) {
	idle := time.NewTimer(idleWorker)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case dl := <-q.work:
			d.deliver(ctx, dl)
		case <-idle.C:
			if d.retire(q) {
				return
			}
		}
		idle.Reset(idleWorker)
	}
}

// retire ends one of q's workers if q is empty, forgetting q with its last
// worker; it reports whether the worker ends.
func (d *Dispatcher) retire(q *subQueue) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(q.work) > 0 {
		return false
	}
	q.workers--
	if q.workers == 0 && d.subs[q.id] == q {
		delete(d.subs, q.id)
	}
	return true
}

// deliver tries dl up to MaxAttempts times, waiting Backoff between
// attempts, in the subscription's format, and logs each attempt's
// outcome. A fence refusal is not retried: the policy will refuse again.
func (d *Dispatcher) deliver(ctx context.Context, dl delivery) {
	log := d.log.With(logkey.Event, dl.event, logkey.OrgID, dl.sub.OrgID,
		logkey.WebhookID, dl.sub.ID, logkey.DeliveryID, dl.id)
	body, err := formatBody(dl.sub.Format, dl.body)
	if err != nil {
		log.Warn("webhook payload encoding failed", logkey.Err, err)
		return
	}
	dl.body = body
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		status, err := d.attempt(ctx, dl)
		if err == nil {
			d.record(d.outcome(dl, attempt, status, time.Since(start), nil, true))
			log.Debug("webhook delivered", logkey.Attempts, attempt, logkey.Status, status)
			return
		}
		if ctx.Err() != nil {
			return // shutting down; not the receiver's failure
		}
		_, refused := errors.AsType[*outbound.RefusedError](err)
		d.record(d.outcome(dl, attempt, status, time.Since(start), err, attempt >= MaxAttempts))
		if refused || attempt >= MaxAttempts {
			log.Warn("webhook delivery given up", logkey.Attempts, attempt, logkey.Status, status, logkey.Err, err)
			return
		}
		wait := min(d.cfg.Backoff(attempt), MaxBackoff)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// errStatus is a response outside 2xx.
var errStatus = errors.New("webhook: receiver answered non-2xx")

// attempt sends dl once and returns the status (0 without a response) and
// nil for any 2xx.
func (d *Dispatcher) attempt(ctx context.Context, dl delivery) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.sub.URL, bytes.NewReader(dl.body))
	if err != nil {
		// The parser's message would quote the URL, which may carry a
		// credential.
		return 0, &outbound.RefusedError{Reason: "invalid URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "aperio/"+buildinfo.Version())
	req.Header.Set(HeaderEvent, dl.event)
	req.Header.Set(HeaderDelivery, dl.id)
	now := time.Now()
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderID, dl.id)
	req.Header.Set(HeaderStdTimestamp, strconv.FormatInt(now.Unix(), 10))
	if dl.sub.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(dl.sub.Secret, dl.body))
		req.Header.Set(HeaderStdSignature, SignStandard(dl.sub.Secret, dl.id, now, dl.body))
	}
	resp, err := d.cfg.Client.Do(ctx, req)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("%w: %s", errStatus, resp.Status)
	}
	return resp.StatusCode, nil
}

// Sign returns the X-Aperio-Signature value for body under secret:
// "sha256=" and the lowercase hex HMAC-SHA256. Receivers compute the same
// over the raw body and compare with hmac.Equal.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// newDeliveryID returns 128 random bits in hex.
func newDeliveryID() string {
	var b [16]byte
	rand.Read(b[:]) // never returns an error (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Payload is the JSON body of a delivery.
type Payload struct {
	Event    string    `json:"event"`
	At       time.Time `json:"at"`
	OrgID    string    `json:"org_id"`
	Hostname string    `json:"hostname"`
	Path     string    `json:"path"`
	Detail   Detail    `json:"detail"`
}

// Detail is the event's own fields, as events.Scaling defines them.
type Detail struct {
	RecordID            string    `json:"record_id"`
	Reason              string    `json:"reason,omitempty"`
	Current             int       `json:"current"`
	Desired             int       `json:"desired"`
	Min                 int       `json:"min"`
	Max                 int       `json:"max"`
	Status              int       `json:"status"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	Utilization         []float64 `json:"utilization"`
	IdempotencyKey      string    `json:"idempotency_key,omitempty"`
	Error               string    `json:"error,omitempty"`
}

// marshalPayload encodes e as a delivery body.
func marshalPayload(e events.Scaling) ([]byte, error) {
	util := e.Utilization
	if util == nil {
		util = []float64{}
	}
	return json.Marshal(Payload{
		Event: e.Type, At: e.At.UTC(), OrgID: e.OrgID, Hostname: e.Hostname, Path: e.Path,
		Detail: Detail{
			RecordID: e.RecordID, Reason: e.Reason,
			Current: e.Current, Desired: e.Desired, Min: e.Min, Max: e.Max,
			Status: e.Status, ConsecutiveFailures: e.ConsecutiveFailures,
			Utilization: util, IdempotencyKey: e.IdempotencyKey, Error: e.Err,
		},
	})
}

// Maintenance events, as the admin API emits them.
const (
	// EventMaintenanceOn is maintenance turned on (or set again) for a
	// hostname.
	EventMaintenanceOn = "maintenance_on"
	// EventMaintenanceOff is maintenance turned off for a hostname.
	EventMaintenanceOff = "maintenance_off"
)

// MaintenanceEvent is maintenance turned on or off through the admin API.
type MaintenanceEvent struct {
	// Type is EventMaintenanceOn or EventMaintenanceOff.
	Type string
	// At is when it changed.
	At time.Time
	// OrgID is the organization of the record; Hostname is exact or a
	// "*." wildcard.
	OrgID, Hostname string
	// By is the actor that changed it.
	By string
	// Reason is what visitors are told; "" for none. Only for
	// EventMaintenanceOn.
	Reason string
	// ExpiresAt is when maintenance ends by itself; nil means when it is
	// turned off. Only for EventMaintenanceOn.
	ExpiresAt *time.Time
}

// MaintenancePayload is the JSON body of a maintenance delivery: the
// same envelope as Payload (event, at, org_id, hostname, path: always
// ""), with the record in Detail.
type MaintenancePayload struct {
	Event    string            `json:"event"`
	At       time.Time         `json:"at"`
	OrgID    string            `json:"org_id"`
	Hostname string            `json:"hostname"`
	Path     string            `json:"path"`
	Detail   MaintenanceDetail `json:"detail"`
}

// MaintenanceDetail is a maintenance event's own fields.
type MaintenanceDetail struct {
	By        string     `json:"by"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// marshalMaintenance encodes e as a delivery body.
func marshalMaintenance(e MaintenanceEvent) ([]byte, error) {
	var exp *time.Time
	if e.ExpiresAt != nil {
		t := e.ExpiresAt.UTC()
		exp = &t
	}
	return json.Marshal(MaintenancePayload{
		Event: e.Type, At: e.At.UTC(), OrgID: e.OrgID, Hostname: e.Hostname,
		Detail: MaintenanceDetail{By: e.By, Reason: e.Reason, ExpiresAt: exp},
	})
}

// EventPayload is the JSON body of a delivery of any event that has no
// payload of its own (all but the scaling and maintenance ones): the same
// envelope as Payload, with Detail holding "actor" (who did it),
// "summary" (the audit entry's text) and the kind's own fields
// (docs/webhooks.md).
type EventPayload struct {
	Event    string         `json:"event"`
	At       time.Time      `json:"at"`
	OrgID    string         `json:"org_id"`
	Hostname string         `json:"hostname"`
	Path     string         `json:"path"`
	Detail   map[string]any `json:"detail"`
}

// marshalEvent encodes e as a delivery body. The kind's own fields never
// replace actor or summary.
func marshalEvent(e events.Event) ([]byte, error) {
	detail := make(map[string]any, len(e.Fields)+2)
	for k, v := range e.Fields {
		detail[k] = v
	}
	detail["actor"], detail["summary"] = e.Actor, e.Detail
	return json.Marshal(EventPayload{
		Event: e.Kind, At: e.At.UTC(), OrgID: e.OrgID, Hostname: e.Hostname, Path: e.Path, Detail: detail,
	})
}
