// Package webhook owns the delivery of server events to the HTTP endpoints
// organizations subscribe: the JSON payload and its Slack and Discord
// formats, its signatures (the Standard Webhooks webhook-signature, and the
// older X-Aperio-Signature), the bounded queue between the emitter and the
// network, the retries with backoff, the record of each attempt in a
// delivery log, and test deliveries and redeliveries sent on request.
// Every delivery goes out through the outbound fence.
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

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/fence"
	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/logkey"
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
	// DefaultMaxQueue is the default bound on queued events.
	DefaultMaxQueue = 1000
	// DefaultWorkers is the default number of concurrent deliveries.
	DefaultWorkers = 4
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
	Client *fence.Client
	// Logger receives deliveries given up, dropped events and lookup
	// failures at Warn, successful deliveries at Debug; nil discards them.
	Logger *slog.Logger
	// MaxQueue bounds the events waiting for delivery, and separately the
	// deliveries waiting for a worker; 0 means DefaultMaxQueue. Emit drops
	// an event that finds the queue full.
	MaxQueue int
	// Workers is how many deliveries run at once; 0 means DefaultWorkers.
	// A worker is busy for the whole of a delivery, its waits between
	// attempts included.
	Workers int
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
	if cfg.Workers == 0 {
		cfg.Workers = def.Workers
	}
	if cfg.Backoff == nil {
		cfg.Backoff = def.Backoff
	}
	return cfg
}

// DefaultConfig returns the default delivery settings: DefaultMaxQueue,
// DefaultWorkers and DefaultBackoff. Subscriptions, Client and Logger are
// nil.
func DefaultConfig() Config {
	return Config{MaxQueue: DefaultMaxQueue, Workers: DefaultWorkers, Backoff: DefaultBackoff}
}

// Validate reports every problem with cfg's settings; the required
// Subscriptions and Client, which New checks, are not settings.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.MaxQueue < 0 {
		errs = append(errs, fmt.Errorf("webhook: max queue %d is negative", cfg.MaxQueue))
	}
	if cfg.Workers < 0 {
		errs = append(errs, fmt.Errorf("webhook: workers %d is negative", cfg.Workers))
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

// queued is an event waiting to be fanned out: a scaling event, or (maint
// set) a maintenance event.
type queued struct {
	typ, orgID string
	scaling    autoscale.Event
	maint      *MaintenanceEvent
}

// payload encodes q as a delivery body.
func (q *queued) payload() ([]byte, error) {
	if q.maint != nil {
		return marshalMaintenance(*q.maint)
	}
	return marshalPayload(q.scaling)
}

// Dispatcher delivers events to webhooks. Emit and EmitMaintenance queue;
// Run delivers. It is safe for concurrent use. Create it with New.
type Dispatcher struct {
	cfg     Config
	log     *slog.Logger
	events  chan queued   // bounded by MaxQueue; Emit drops when full
	work    chan delivery // bounded by MaxQueue; fanLoop waits
	started atomic.Bool
	dropped atomic.Int64
	// dropping is set by the first drop of an overflow and cleared by the
	// next event queued, so that each overflow is logged once.
	dropping atomic.Bool
	// records queues delivery log writes for recordLoop; bounded by
	// MaxQueue, record drops when full.
	records        chan Delivery
	recordsDropped atomic.Int64
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
		work:    make(chan delivery, cfg.MaxQueue),
		records: make(chan Delivery, cfg.MaxQueue),
	}, nil
}

// Emit queues e for delivery to every subscription of e.OrgID that lists
// e.Type. It never blocks: when the queue is full the event is dropped,
// counted in Dropped and logged once per overflow. Events queued while Run
// is not running wait for it; those still queued when Run returns are not
// delivered. Emit implements autoscale.Events.
func (d *Dispatcher) Emit(_ context.Context, e autoscale.Event) {
	d.enqueue(queued{typ: e.Type, orgID: e.OrgID, scaling: e})
}

// EmitMaintenance queues e for delivery to every subscription of e.OrgID
// that lists e.Type, like Emit: it never blocks, and drops the event when
// the queue is full.
func (d *Dispatcher) EmitMaintenance(_ context.Context, e MaintenanceEvent) {
	d.enqueue(queued{typ: e.Type, orgID: e.OrgID, maint: &e})
}

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

// Dropped returns how many events Emit has dropped because the queue was
// full, since New.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// Run delivers queued events until ctx is done, then abandons deliveries
// in progress, waits for its goroutines to exit and returns nil. It may be
// called once; a second call returns an error.
func (d *Dispatcher) Run(ctx context.Context) error {
	if d.started.Swap(true) {
		return errors.New("webhook: Run called twice")
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.fanLoop(ctx) })
	if d.cfg.Deliveries != nil {
		wg.Go(func() { d.recordLoop(ctx) })
	}
	for range d.cfg.Workers {
		wg.Go(func() { d.deliverLoop(ctx) })
	}
	wg.Wait()
	return nil
}

// fanLoop turns each event into one delivery per subscription. When the
// workers fall behind it waits for room, and Emit's queue absorbs the
// difference, then drops.
func (d *Dispatcher) fanLoop(ctx context.Context) {
	for {
		var e queued
		select {
		case <-ctx.Done():
			return
		case e = <-d.events:
		}
		subs, err := d.cfg.Subscriptions.WebhooksFor(ctx, e.orgID, e.typ)
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
			dl := delivery{id: newDeliveryID(), sub: s, event: e.typ, body: body}
			select {
			case <-ctx.Done():
				return
			case d.work <- dl:
			}
		}
	}
}

// deliverLoop runs deliveries one at a time.
func (d *Dispatcher) deliverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case dl := <-d.work:
			d.deliver(ctx, dl)
		}
	}
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
		_, refused := errors.AsType[*fence.RefusedError](err)
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
		return 0, &fence.RefusedError{Reason: "invalid URL"}
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

// Detail is the event's own fields, as autoscale.Event defines them.
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
func marshalPayload(e autoscale.Event) ([]byte, error) {
	util := e.Utilization
	if util == nil {
		util = []float64{}
	}
	return json.Marshal(Payload{
		Event: e.Type, At: e.At.UTC(), OrgID: e.OrgID, Hostname: e.Hostname, Path: e.Path,
		Detail: Detail{
			RecordID: e.RecordID, Reason: string(e.Reason),
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
