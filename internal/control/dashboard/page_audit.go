package dashboard

import (
	"net/url"
	"strconv"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

func init() {
	register(&page{
		Name: "audit", Title: "audit.title", Order: 100,
		Load: func(c *Ctx) (any, error) { return loadAudit(c) },
		Actions: map[string]func(*Ctx) (any, error){
			"verify": verifyAudit,
		},
	})
}

// maxAuditLimit is the API's largest GET /audit limit.
const maxAuditLimit = 1000

// auditPage is the audit page's data.
type auditPage struct {
	Entries []apitype.AuditEntry
	// Filter is the filter form's values as given (the page's query).
	Filter url.Values
	// Since and Until are the time range as a datetime-local input shows
	// it (UTC); "" when not given or not a time.
	Since, Until string
	// VerifyAction is the verify form's action, the filter kept.
	VerifyAction string
	// Verify is the chain check's answer; nil until it is asked for.
	Verify *apitype.AuditVerify
}

// loadAudit reads the audit log with the filter of the page's query:
// event, actor, hostname, since and until (RFC 3339, or a datetime-local
// value read as UTC) and limit (1 to 1000).
func loadAudit(c *Ctx) (*auditPage, error) {
	f := c.R.URL.Query()
	d := &auditPage{Filter: f, VerifyAction: UIPrefix + "audit/verify"}
	q := url.Values{}
	for _, k := range []struct {
		name, label string
		max         int
	}{{"event", "audit.field.event", 100}, {"actor", "audit.field.actor", maxNameBytes + 10}, {"hostname", "audit.field.hostname", 300}} {
		v, err := fieldText(c, f, k.name, k.label, k.max, false)
		if err != nil {
			return d, err
		}
		if v != "" {
			q.Set(k.name, v)
		}
	}
	var since time.Time
	for _, k := range []struct{ name, label string }{{"since", "audit.field.since"}, {"until", "audit.field.until"}} {
		v, err := fieldText(c, f, k.name, k.label, 64, false)
		if err != nil || v == "" {
			if err != nil {
				return d, err
			}
			continue
		}
		t, ok := parseTime(v)
		if !ok {
			return d, &FormError{Message: c.T("audit.bad_time", c.T(k.label), v)}
		}
		local := t.Format("2006-01-02T15:04:05")
		if k.name == "since" {
			since, d.Since = t, local
		} else {
			d.Until = local
		}
		if k.name == "until" && !since.IsZero() && t.Before(since) {
			return d, &FormError{Message: c.T("audit.until_before_since")}
		}
		q.Set(k.name, t.Format(time.RFC3339))
	}
	if s := f.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAuditLimit {
			return d, &FormError{Message: c.T("audit.bad_limit", maxAuditLimit)}
		}
		q.Set("limit", strconv.Itoa(n))
	}
	path := "/audit"
	if enc := q.Encode(); enc != "" {
		path += "?" + enc
		d.VerifyAction += "?" + enc
	}
	return d, c.Get(path, &d.Entries)
}

// verifyAudit checks the audit hash chain (GET /audit/verify) and shows
// the answer above the filtered log.
func verifyAudit(c *Ctx) (any, error) {
	var v apitype.AuditVerify
	if err := c.Get("/audit/verify", &v); err != nil {
		return nil, err
	}
	d, err := loadAudit(c)
	d.Verify = &v
	if err != nil {
		// The check's answer stands; the listing's trouble is shown in
		// its place.
		d.Entries = nil
		v.Error = v.Error + " " + errText(c, err)
	}
	return d, nil
}
