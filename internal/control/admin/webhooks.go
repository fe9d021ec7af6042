package admin

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/store"
)

// maxSecretLen bounds a webhook secret, in bytes.
const maxSecretLen = 1024

// Delivery log listing bounds: GET /webhooks/{id}/deliveries' default and
// largest limit. The largest is what the log keeps.
const (
	defaultDeliveryLimit = 20
	maxDeliveryLimit     = store.DefaultDeliveryKeep
)

func (a *API) listWebhooks(w http.ResponseWriter, r *http.Request, c caller) error {
	ws, err := a.store.ListWebhooks(r.Context(), c.scope())
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, mapList(ws, webhookOf))
	return nil
}

func (a *API) createWebhook(w http.ResponseWriter, r *http.Request, c caller) error {
	var req CreateWebhookRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	problems := a.checkWebhookURL(req.URL)
	events, evProblems := validEvents(req.Events)
	problems = append(problems, evProblems...)
	format := cmp.Or(req.Format, apitype.WebhookFormatGeneric)
	if !slices.Contains(apitype.WebhookFormats(), format) {
		problems = append(problems, fmt.Sprintf("format: %.64q is not one of %s", req.Format, strings.Join(apitype.WebhookFormats(), ", ")))
	}
	switch {
	case len(req.Secret) > maxSecretLen:
		problems = append(problems, fmt.Sprintf("secret is longer than %d bytes", maxSecretLen))
	case strings.IndexFunc(req.Secret, unicode.IsControl) >= 0:
		problems = append(problems, "secret contains control characters")
	}
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	orgID, err := a.targetOrg(r.Context(), c, req.OrgID)
	if err != nil {
		return err
	}
	wh, err := a.store.CreateWebhook(r.Context(), store.Webhook{
		OrgID:  orgID,
		URL:    req.URL,
		Secret: req.Secret,
		Events: events,
		Format: format,
	})
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "organization %q not found", orgID)
	}
	if err != nil {
		return err
	}
	a.subs.Invalidate(wh.OrgID)
	a.audit(r, store.AuditEntry{
		Event:  EventWebhookCreated,
		Actor:  c.actor(),
		OrgID:  wh.OrgID,
		Detail: webhookDetail(wh),
	})
	a.writeJSON(w, r, http.StatusCreated, webhookOf(wh))
	return nil
}

// webhookFor returns the webhook of the {id} path parameter within the
// caller's scope: another organization's answers 404, like a missing one.
func (a *API) webhookFor(r *http.Request, c caller) (store.Webhook, error) {
	id := pathParam(r, "id")
	ws, err := a.store.ListWebhooks(r.Context(), c.scope())
	if err != nil {
		return store.Webhook{}, err
	}
	i := slices.IndexFunc(ws, func(wh store.Webhook) bool { return wh.ID == id })
	if i < 0 {
		return store.Webhook{}, errorf(http.StatusNotFound, "webhook %.64q not found", id)
	}
	return ws[i], nil
}

func (a *API) deleteWebhook(w http.ResponseWriter, r *http.Request, c caller) error {
	// Look it up within the caller's scope first, for the organization
	// and destination the audit entry records.
	wh, err := a.webhookFor(r, c)
	if err != nil {
		return err
	}
	id := wh.ID
	err = a.store.DeleteWebhook(r.Context(), wh.OrgID, id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "webhook %q not found", id)
	}
	if err != nil {
		return err
	}
	a.subs.Invalidate(wh.OrgID)
	a.audit(r, store.AuditEntry{
		Event:  EventWebhookDeleted,
		Actor:  c.actor(),
		OrgID:  wh.OrgID,
		Detail: webhookDetail(wh),
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listWebhookDeliveries(w http.ResponseWriter, r *http.Request, c caller) error {
	limit := defaultDeliveryLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxDeliveryLimit {
			return errorf(http.StatusBadRequest, "limit %.32q is not a number from 1 to %d", s, maxDeliveryLimit)
		}
		limit = n
	}
	wh, err := a.webhookFor(r, c)
	if err != nil {
		return err
	}
	ds, err := a.store.ListWebhookDeliveries(r.Context(), wh.OrgID, wh.ID, limit)
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, mapList(ds, deliveryOf))
	return nil
}

func (a *API) testWebhook(w http.ResponseWriter, r *http.Request, c caller) error {
	wh, err := a.webhookFor(r, c)
	if err != nil {
		return err
	}
	if a.webhooks == nil {
		return errorf(http.StatusNotFound, "this server sends no test deliveries")
	}
	d, err := a.webhooks.Test(r.Context(), wh)
	if err != nil {
		return err
	}
	a.answerSent(w, r, c, EventWebhookTested, wh, d)
	return nil
}

func (a *API) redeliverWebhook(w http.ResponseWriter, r *http.Request, c caller) error {
	wh, err := a.webhookFor(r, c)
	if err != nil {
		return err
	}
	id := pathParam(r, "delivery_id")
	prev, err := a.store.WebhookDelivery(r.Context(), wh.OrgID, wh.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "delivery %.64q of webhook %s not found", id, wh.ID)
	}
	if err != nil {
		return err
	}
	if a.webhooks == nil {
		return errorf(http.StatusNotFound, "this server sends no redeliveries")
	}
	d, err := a.webhooks.Redeliver(r.Context(), wh, prev)
	if errors.Is(err, webhook.ErrNoBody) {
		return errorf(http.StatusConflict, "delivery %s: its body was not kept (over %d bytes), so it cannot be sent again", id, store.MaxDeliveryBody)
	}
	if err != nil {
		return err
	}
	a.answerSent(w, r, c, EventWebhookRedelivered, wh, d)
	return nil
}

// answerSent audits a delivery sent on request as event and answers it.
func (a *API) answerSent(w http.ResponseWriter, r *http.Request, c caller, event string, wh store.Webhook, d store.WebhookDelivery) {
	a.audit(r, store.AuditEntry{
		Event:  event,
		Actor:  c.actor(),
		OrgID:  wh.OrgID,
		Detail: fmt.Sprintf("%s delivery=%s status=%s", webhookDetail(wh), d.ID, d.Status),
	})
	a.writeJSON(w, r, http.StatusOK, deliveryOf(d))
}

// checkWebhookURL returns the problems of raw as a webhook URL: the
// static checks of the outbound policy. The answer quotes the fence's
// reason, which never holds the URL's path or userinfo.
func (a *API) checkWebhookURL(raw string) []string {
	if strings.TrimSpace(raw) == "" {
		return []string{"url is required"}
	}
	err := a.fence.CheckURL(raw)
	if err == nil {
		return nil
	}
	if re, ok := errors.AsType[*outbound.RefusedError](err); ok {
		return []string{"url is not permitted by the outbound policy: " + re.Reason}
	}
	return []string{"url is not permitted by the outbound policy"}
}

// validEvents returns events without duplicates, and the problems: none
// given, or a name the server does not emit.
func validEvents(events []string) ([]string, []string) {
	known := apitype.WebhookEvents()
	if len(events) == 0 {
		return nil, []string{"events: at least one is required (" + strings.Join(known, ", ") + ")"}
	}
	var out, problems []string
	for i, e := range events {
		if !slices.Contains(known, e) {
			problems = append(problems, fmt.Sprintf("events[%d]: %q is not one of %s", i, e, strings.Join(known, ", ")))
			continue
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, problems
}

// webhookDetail describes wh for the audit log: the destination's origin
// only, since a URL's path or query can be a credential, and never the
// secret.
func webhookDetail(wh store.Webhook) string {
	return fmt.Sprintf("webhook %s origin=%s events=%s signed=%t format=%s", wh.ID, urlOrigin(wh.URL), strings.Join(wh.Events, ","), wh.Secret != "", cmp.Or(wh.Format, apitype.WebhookFormatGeneric))
}
