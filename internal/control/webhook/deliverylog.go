package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
)

// Delivery is one delivery as the delivery log keeps it: an alias of the
// store's type, so that *store.DB is a DeliveryLog as it is.
type Delivery = store.WebhookDelivery

// DeliveryLog keeps the outcome of each delivery. RecordWebhookDelivery
// creates the delivery d.ID when it is new and otherwise updates it,
// keeping the subscription's newest keep (0 means the store's default);
// it must be safe for concurrent use. *store.DB implements it.
type DeliveryLog interface {
	RecordWebhookDelivery(ctx context.Context, d Delivery, keep int) (Delivery, error)
}

// recordTimeout bounds one write to the delivery log: a slow store delays
// the log, never a delivery.
const recordTimeout = 5 * time.Second

// ErrNoBody is a redelivery of a delivery whose body the log did not keep
// (larger than store.MaxDeliveryBody).
var ErrNoBody = errors.New("webhook: delivery body not kept")

// Test sends a ping event to sub alone, whatever events it lists, in its
// format and signed like any delivery: one attempt now, outside the
// queue, with no retry. It blocks until the receiver answers or ctx ends
// (each attempt is bounded by outbound.Timeout), records the delivery in the
// log and returns it; the answer of the receiver, good or bad, is in the
// Delivery, not the error. A failed log write is logged, not returned.
func (d *Dispatcher) Test(ctx context.Context, sub Subscription) (Delivery, error) {
	generic, err := pingPayload(sub, time.Now())
	if err != nil {
		return Delivery{}, err
	}
	body, err := formatBody(sub.Format, generic)
	if err != nil {
		return Delivery{}, err
	}
	return d.sendNow(ctx, delivery{id: newDeliveryID(), sub: sub, event: EventPing, body: body}, 1), nil
}

// pingPayload is the generic body of a test delivery to sub at now: the
// envelope of Payload, with the subscription's ID as its detail.
func pingPayload(sub Subscription, now time.Time) ([]byte, error) {
	type detail struct {
		WebhookID string `json:"webhook_id"`
	}
	return json.Marshal(struct {
		Event    string    `json:"event"`
		At       time.Time `json:"at"`
		OrgID    string    `json:"org_id"`
		Hostname string    `json:"hostname"`
		Path     string    `json:"path"`
		Detail   detail    `json:"detail"`
	}{Event: EventPing, At: now.UTC(), OrgID: sub.OrgID, Detail: detail{sub.ID}})
}

// Redeliver sends prev, a delivery of sub from the log, again: its stored
// body unchanged (in the format it was first sent in) under the same
// webhook-id, with a new webhook-timestamp and signatures, so that a
// receiver that already handled it can recognise it and one that missed
// it can verify it. Like Test it makes one attempt now, records it (the
// delivery's attempts go up by one) and returns the updated Delivery.
// The error wraps ErrNoBody when the log kept no body.
func (d *Dispatcher) Redeliver(ctx context.Context, sub Subscription, prev Delivery) (Delivery, error) {
	if len(prev.Body) == 0 {
		return Delivery{}, ErrNoBody
	}
	return d.sendNow(ctx, delivery{id: prev.ID, sub: sub, event: prev.Event, body: prev.Body}, prev.Attempts+1), nil
}

// sendNow makes one attempt of dl as the attempt-th and records it
// synchronously, so that the log shows it when the caller answers.
func (d *Dispatcher) sendNow(ctx context.Context, dl delivery, attempt int) Delivery {
	start := time.Now()
	status, err := d.attempt(ctx, dl)
	rec := d.outcome(dl, attempt, status, time.Since(start), err, true)
	if d.cfg.Deliveries != nil {
		// The attempt happened: it is logged even when the caller has
		// gone meanwhile.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		stored, werr := d.cfg.Deliveries.RecordWebhookDelivery(wctx, rec, d.cfg.KeepDeliveries)
		cancel()
		if werr != nil {
			d.log.Warn("webhook delivery log write failed", logkey.DeliveryID, dl.id, logkey.WebhookID, dl.sub.ID, logkey.Err, werr)
		} else {
			rec = stored
		}
	}
	return rec
}

// outcome is the log's row for the attempt-th attempt of dl, which
// answered status (0 for none) after took with err; final says no other
// attempt follows a failure.
func (d *Dispatcher) outcome(dl delivery, attempt, status int, took time.Duration, err error, final bool) Delivery {
	rec := Delivery{
		ID: dl.id, WebhookID: dl.sub.ID, OrgID: dl.sub.OrgID, Event: dl.event,
		Status: store.DeliveryDelivered, Attempts: attempt, LastStatusCode: status, ResponseTime: took,
	}
	if len(dl.body) <= store.MaxDeliveryBody {
		rec.Body = dl.body
	}
	if err != nil {
		rec.LastError = publicError(err)
		_, refused := errors.AsType[*outbound.RefusedError](err)
		switch {
		case refused:
			rec.Status = store.DeliveryDropped
		case final:
			rec.Status = store.DeliveryFailed
		default:
			rec.Status = store.DeliveryPending
		}
	}
	return rec
}

// publicError is err as the log and the API may show it: without the
// request URL, whose path or query can be a credential.
func publicError(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return err.Error()
}

// record queues rec for the delivery log without blocking: when the log
// falls behind by MaxQueue writes, rec is dropped and counted.
func (d *Dispatcher) record(rec Delivery) {
	if d.cfg.Deliveries == nil {
		return
	}
	select {
	case d.records <- &rec:
	default:
		if n := d.recordsDropped.Add(1); n == 1 || n%1000 == 0 {
			d.log.Warn("webhook delivery log behind, dropping records", logkey.Dropped, n)
		}
	}
}

// RecordsDropped returns how many delivery log writes were dropped
// because the log fell behind, since New.
func (d *Dispatcher) RecordsDropped() int64 { return d.recordsDropped.Load() }

// recordLoop writes the queued records in order, so that a delivery's
// later attempts land after its earlier ones. A failed write is logged
// once per run of failures and skipped.
func (d *Dispatcher) recordLoop(ctx context.Context) {
	failing := false
	for {
		var rec *Delivery
		select {
		case <-ctx.Done():
			return
		case rec = <-d.records:
		}
		wctx, cancel := context.WithTimeout(ctx, recordTimeout)
		_, err := d.cfg.Deliveries.RecordWebhookDelivery(wctx, *rec, d.cfg.KeepDeliveries)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			d.log.Warn("webhook delivery log write failed", logkey.DeliveryID, rec.ID, logkey.WebhookID, rec.WebhookID, logkey.Err, err)
		case err == nil:
			failing = false
		}
	}
}
