package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "maintenance", Title: "maintenance.title", Order: 90,
		Load: loadMaintenance,
		Actions: map[string]func(*Ctx) (any, error){
			"set":   setMaintenance,
			"clear": clearMaintenance,
		},
	})
}

// maintenancePage is the maintenance page's data.
type maintenancePage struct {
	// Records are the hostnames in maintenance through the API; the
	// configured maintenance_windows are not listed by the API.
	Records []apitype.Maintenance
	Orgs    []apitype.Org
	// Form is the refused form, to fill it in again; nil otherwise.
	Form url.Values
}

func loadMaintenance(c *Ctx) (any, error) {
	d := &maintenancePage{Form: postedForm(c)}
	if err := c.Get("/maintenance", &d.Records); err != nil {
		return d, err
	}
	var err error
	d.Orgs, err = loadOrgChoice(c)
	return d, err
}

// setMaintenance turns maintenance on for the form's hostname (exact or
// "*." wildcard), with its reason and, given a duration, an end.
func setMaintenance(c *Ctx) (any, error) {
	host, err := fieldHostname(c)
	if err != nil {
		return nil, err
	}
	var req apitype.MaintenanceRequest
	if req.Reason, err = fieldText(c, c.R.PostForm, "reason", "maintenance.field.reason", maxReasonBytes, false); err != nil {
		return nil, err
	}
	ttl, err := fieldText(c, c.R.PostForm, "ttl", "maintenance.field.ttl", 64, false)
	if err != nil {
		return nil, err
	}
	if ttl != "" {
		d, ok := parseDuration(ttl, maxMaintenanceTTL)
		if !ok || d < time.Second {
			return nil, &FormError{Message: c.T("maintenance.bad_ttl", ttl)}
		}
		req.TTLSeconds = int64(d / time.Second)
	}
	if req.OrgID, err = fieldOrg(c); err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodPut, "/maintenance/"+url.PathEscape(host), req, nil)
}

// clearMaintenance turns maintenance off for the form's hostname.
func clearMaintenance(c *Ctx) (any, error) {
	host, err := fieldHostname(c)
	if err != nil {
		return nil, err
	}
	return nil, c.Send(http.MethodDelete, "/maintenance/"+url.PathEscape(host), nil, nil)
}

// fieldHostname is the form's hostname field: one exact name or "*."
// wildcard, lowercased.
func fieldHostname(c *Ctx) (string, error) {
	h, err := fieldText(c, c.R.PostForm, "hostname", "maintenance.field.hostname", 300, true)
	if err != nil {
		return "", err
	}
	hs, err := checkHostnames(c, "maintenance.field.hostname", []string{strings.TrimSuffix(h, ".")})
	if err != nil {
		return "", err
	}
	return hs[0], nil
}
