package dashboard

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "webhooks", Title: "webhooks.title", Group: navAdmin, Order: 80,
		Load: func(c *Ctx) (any, error) { return loadWebhooks(c) },
		Actions: map[string]func(*Ctx) (any, error){
			"create": createWebhook,
			"delete": deleteWebhook,
		},
	})
}

// webhooksPage is the webhooks page's data.
type webhooksPage struct {
	Webhooks []apitype.Webhook
	// Events are the events a subscription may name.
	Events []string
	Orgs   []apitype.Org
	// Form is the refused form, to fill it in again (never its
	// secret); nil otherwise.
	Form url.Values
}

// Checked reports whether the refused form had event e ticked.
func (d *webhooksPage) Checked(e string) bool {
	return d.Form != nil && slices.Contains(d.Form["events"], e)
}

func loadWebhooks(c *Ctx) (*webhooksPage, error) {
	d := &webhooksPage{Events: apitype.WebhookEvents(), Form: postedForm(c)}
	if err := c.Get("/webhooks", &d.Webhooks); err != nil {
		return d, err
	}
	var err error
	d.Orgs, err = loadOrgChoice(c)
	return d, err
}

// createWebhook subscribes the form's URL to its events, signed with the
// form's secret when it has one. The API never mints a secret: the one
// given is the one used, and it is never shown again.
func createWebhook(c *Ctx) (any, error) {
	var req apitype.CreateWebhookRequest
	var err error
	if req.URL, err = fieldText(c, c.R.PostForm, "url", "webhooks.field.url", maxFieldBytes, true); err != nil {
		return nil, err
	}
	if u, err := url.Parse(req.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &FormError{Message: c.T("webhooks.bad_url")}
	}
	evs := c.R.PostForm["events"]
	if len(evs) == 0 {
		return nil, &FormError{Message: c.T("webhooks.no_events")}
	}
	known := apitype.WebhookEvents()
	for _, e := range evs {
		if !slices.Contains(known, e) {
			return nil, &FormError{Message: c.T("webhooks.bad_event")}
		}
		if !slices.Contains(req.Events, e) {
			req.Events = append(req.Events, e)
		}
	}
	// A secret is taken as typed, spaces included: trimming would sign
	// with a key the receiver does not have.
	req.Secret = c.Form("secret")
	if len(req.Secret) > maxFieldBytes {
		return nil, &FormError{Message: c.T("form.too_long", c.T("webhooks.field.secret"), maxFieldBytes)}
	}
	if strings.ContainsFunc(req.Secret, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, &FormError{Message: c.T("form.control", c.T("webhooks.field.secret"))}
	}
	if req.OrgID, err = fieldOrg(c); err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodPost, "/webhooks", req, nil)
}

// deleteWebhook deletes the subscription the form names.
func deleteWebhook(c *Ctx) (any, error) {
	id := c.Form("id")
	if err := checkID(c, id); err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodDelete, "/webhooks/"+url.PathEscape(id), nil, nil)
}
