package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/aperio-dev/aperio/fence"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/wire"
)

// maxSecretLen bounds a webhook secret, in bytes.
const maxSecretLen = 1024

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

func (a *API) deleteWebhook(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	// Look it up within the caller's scope first, for the organization
	// and destination the audit entry records.
	ws, err := a.store.ListWebhooks(r.Context(), c.scope())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ws, func(wh store.Webhook) bool { return wh.ID == id })
	if i < 0 {
		return errorf(http.StatusNotFound, "webhook %q not found", id)
	}
	wh := ws[i]
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
	if re, ok := errors.AsType[*fence.RefusedError](err); ok {
		return []string{"url is not permitted by the outbound policy: " + re.Reason}
	}
	return []string{"url is not permitted by the outbound policy"}
}

// validEvents returns events without duplicates, and the problems: none
// given, or a name the server does not emit.
func validEvents(events []string) ([]string, []string) {
	known := wire.WebhookEvents()
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
	origin := "?"
	if u, err := url.Parse(wh.URL); err == nil {
		origin = u.Scheme + "://" + u.Host
	}
	return fmt.Sprintf("webhook %s origin=%s events=%s signed=%t", wh.ID, origin, strings.Join(wh.Events, ","), wh.Secret != "")
}
