package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// Statuses of a WebhookDelivery.
const (
	// DeliveryPending is a delivery still being tried.
	DeliveryPending = "pending"
	// DeliveryDelivered is a delivery a receiver answered with a 2xx.
	DeliveryDelivered = "delivered"
	// DeliveryFailed is a delivery given up after its attempts.
	DeliveryFailed = "failed"
	// DeliveryDropped is a delivery never sent: the outbound policy
	// refused its URL.
	DeliveryDropped = "dropped"
)

// Bounds of the delivery log.
const (
	// MaxDeliveryBody bounds a stored delivery body, in bytes. A larger
	// body is refused: the caller logs the delivery without it.
	MaxDeliveryBody = 64 << 10
	// MaxDeliveryError bounds a stored LastError, in bytes; a longer one
	// is cut at a rune boundary.
	MaxDeliveryError = 500
	// MaxDeliveryField bounds the ID and event of a delivery, in bytes.
	MaxDeliveryField = 256
	// DefaultDeliveryKeep is how many deliveries of one subscription the
	// log keeps when the caller asks for 0.
	DefaultDeliveryKeep = 100
	// MaxDeliveryKeep bounds the keep of RecordWebhookDelivery and the
	// limit of ListWebhookDeliveries.
	MaxDeliveryKeep = 1000
)

// WebhookDelivery is one delivery of an event to a subscription, as the
// delivery log keeps it: created when its first attempt ends and updated
// after each later one.
type WebhookDelivery struct {
	// ID is the delivery's webhook-id, assigned by the caller: the same
	// for every attempt and for a redelivery.
	ID string
	// WebhookID is the subscription; OrgID is its organization.
	WebhookID, OrgID string
	// Event is the event type, such as "scaling_failed".
	Event string
	// Status is one of DeliveryPending, DeliveryDelivered,
	// DeliveryFailed and DeliveryDropped.
	Status string
	// Attempts counts the attempts made so far.
	Attempts int
	// LastError is the last attempt's error, "" after a success; cut to
	// MaxDeliveryError bytes.
	LastError string
	// LastStatusCode is the last attempt's HTTP status, 0 without a
	// response.
	LastStatusCode int
	// ResponseTime is how long the last attempt took, kept in
	// milliseconds.
	ResponseTime time.Duration
	// Body is the payload as sent (at most MaxDeliveryBody bytes); empty
	// when it was not kept. It is written when the delivery is created
	// and never changed.
	Body []byte
	// CreatedAt and UpdatedAt are assigned by the store.
	CreatedAt, UpdatedAt time.Time
}

var deliveryStatuses = []string{DeliveryPending, DeliveryDelivered, DeliveryFailed, DeliveryDropped}

// RecordWebhookDelivery stores d: a new row when d.ID is new (CreatedAt
// now, Body kept), else its status, attempts, error, status code and
// response time written over the stored row's (UpdatedAt now, Body and
// CreatedAt unchanged). In the same transaction as an insert it deletes
// the subscription's oldest deliveries beyond keep (0 means
// DefaultDeliveryKeep). It returns the row as stored. The error wraps
// ErrNotFound when the subscription does not exist (it may have been
// deleted meanwhile), and is plain for bad input: an unknown status, a
// body over MaxDeliveryBody, an empty or overlong ID or event.
func (db *DB) RecordWebhookDelivery(ctx context.Context, d WebhookDelivery, keep int) (WebhookDelivery, error) {
	if db.closed.Load() {
		return WebhookDelivery{}, errClosed
	}
	var errs []error
	if d.ID == "" || len(d.ID) > MaxDeliveryField {
		errs = append(errs, fmt.Errorf("store: record webhook delivery: id must be 1 to %d bytes", MaxDeliveryField))
	}
	if d.WebhookID == "" || d.OrgID == "" {
		errs = append(errs, errors.New("store: record webhook delivery: empty webhook or org"))
	}
	if d.Event == "" || len(d.Event) > MaxDeliveryField {
		errs = append(errs, fmt.Errorf("store: record webhook delivery: event must be 1 to %d bytes", MaxDeliveryField))
	}
	if !slices.Contains(deliveryStatuses, d.Status) {
		errs = append(errs, fmt.Errorf("store: record webhook delivery: unknown status %q", d.Status))
	}
	if len(d.Body) > MaxDeliveryBody {
		errs = append(errs, fmt.Errorf("store: record webhook delivery: body of %d bytes, at most %d", len(d.Body), MaxDeliveryBody))
	}
	if d.Attempts < 0 || d.ResponseTime < 0 {
		errs = append(errs, errors.New("store: record webhook delivery: negative attempts or response time"))
	}
	if keep < 0 || keep > MaxDeliveryKeep {
		errs = append(errs, fmt.Errorf("store: record webhook delivery: keep %d, want 0 to %d", keep, MaxDeliveryKeep))
	}
	if err := errors.Join(errs...); err != nil {
		return WebhookDelivery{}, err
	}
	if keep == 0 {
		keep = DefaultDeliveryKeep
	}
	d.LastError = truncateUTF8(d.LastError, MaxDeliveryError)
	d.ResponseTime = d.ResponseTime.Truncate(time.Millisecond)
	if d.Body == nil {
		d.Body = []byte{}
	}
	now := stamp(db.now())
	d.CreatedAt, d.UpdatedAt = now, now
	out, err := db.b.recordWebhookDelivery(ctx, d, keep)
	if err != nil {
		return WebhookDelivery{}, db.fail("record webhook delivery "+d.ID, err)
	}
	return out, nil
}

// ListWebhookDeliveries returns the latest deliveries of subscription
// webhookID in organization orgID ("" means any), newest first, at most
// limit (0 means DefaultDeliveryKeep; at most MaxDeliveryKeep). A
// subscription with none, or of another organization, has an empty list.
func (db *DB) ListWebhookDeliveries(ctx context.Context, orgID, webhookID string, limit int) ([]WebhookDelivery, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if limit < 0 || limit > MaxDeliveryKeep {
		return nil, fmt.Errorf("store: list webhook deliveries: limit %d, want 0 to %d", limit, MaxDeliveryKeep)
	}
	if limit == 0 {
		limit = DefaultDeliveryKeep
	}
	ds, err := db.b.listWebhookDeliveries(ctx, orgID, webhookID, limit)
	if err != nil {
		return nil, db.fail("list webhook deliveries", err)
	}
	return ds, nil
}

// WebhookDelivery returns delivery id of subscription webhookID in
// organization orgID ("" means any), or an error wrapping ErrNotFound.
func (db *DB) WebhookDelivery(ctx context.Context, orgID, webhookID, id string) (WebhookDelivery, error) {
	if db.closed.Load() {
		return WebhookDelivery{}, errClosed
	}
	d, err := db.b.webhookDelivery(ctx, orgID, webhookID, id)
	if err != nil {
		return WebhookDelivery{}, db.fail("webhook delivery "+id, err)
	}
	return d, nil
}

// truncateUTF8 returns s cut to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
