package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Webhook is an organization's subscription to server events: where they
// are POSTed, which ones, and the secret that signs them.
type Webhook struct {
	// ID is assigned by the store ("whk_…").
	ID string
	// OrgID is the owning organization; it must exist. Only its events
	// are delivered.
	OrgID string
	// URL receives the deliveries, as the caller validated it.
	URL string
	// Secret keys the deliveries' signature; "" means unsigned. The store
	// keeps and returns it as given: keeping it out of API answers and
	// logs is the caller's job.
	Secret string
	// Events lists the event names delivered, as the caller validated
	// them, without duplicates. Never empty once stored.
	Events []string
	// Format is how the deliveries' bodies are written, as the caller
	// validated it: "generic" (the JSON envelope), "slack" or "discord".
	// "" is stored as "generic".
	Format string
	// CreatedAt is assigned by the store.
	CreatedAt time.Time
}

// CreateWebhook stores w with a new ID and CreatedAt and returns it as
// stored (Events copied, duplicates dropped, first occurrence kept). ID and
// CreatedAt in w are ignored. The error wraps ErrNotFound when the
// organization does not exist.
func (db *DB) CreateWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	if db.closed.Load() {
		return Webhook{}, errClosed
	}
	var errs []error
	if w.OrgID == "" {
		errs = append(errs, errors.New("store: create webhook: empty org"))
	}
	if w.URL == "" {
		errs = append(errs, errors.New("store: create webhook: empty url"))
	}
	var events []string
	for _, e := range w.Events {
		if e == "" {
			errs = append(errs, errors.New("store: create webhook: empty event name"))
			continue
		}
		if !slices.Contains(events, e) {
			events = append(events, e)
		}
	}
	if len(events) == 0 {
		errs = append(errs, errors.New("store: create webhook: no events"))
	}
	if err := errors.Join(errs...); err != nil {
		return Webhook{}, err
	}
	if w.Format == "" {
		w.Format = "generic"
	}
	w.ID = newID("whk")
	w.Events = events
	w.CreatedAt = stamp(db.now())
	if err := db.b.insertWebhook(ctx, w); err != nil {
		return Webhook{}, db.fail(fmt.Sprintf("create webhook in org %s", w.OrgID), err)
	}
	return w, nil
}

// ListWebhooks returns the webhooks of organization orgID ("" means all),
// newest first.
func (db *DB) ListWebhooks(ctx context.Context, orgID string) ([]Webhook, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	ws, err := db.b.listWebhooks(ctx, orgID)
	if err != nil {
		return nil, db.fail("list webhooks", err)
	}
	return ws, nil
}

// DeleteWebhook deletes the webhook. The error wraps ErrNotFound when no
// such webhook is in orgID ("" means any organization).
func (db *DB) DeleteWebhook(ctx context.Context, orgID, id string) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.deleteWebhook(ctx, orgID, id); err != nil {
		return db.fail("delete webhook "+id, err)
	}
	return nil
}

// WebhooksFor returns the webhooks of organization orgID that list event,
// oldest first, so that deliveries go out in subscription order. An empty
// orgID matches nothing: every event belongs to an organization.
func (db *DB) WebhooksFor(ctx context.Context, orgID, event string) ([]Webhook, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if orgID == "" || event == "" {
		return []Webhook{}, nil
	}
	ws, err := db.b.webhooksFor(ctx, orgID, event)
	if err != nil {
		return nil, db.fail("webhooks for "+event, err)
	}
	return ws, nil
}
