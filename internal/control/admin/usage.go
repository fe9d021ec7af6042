package admin

import (
	"net/http"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/store"
)

// defaultUsageDays is the span of GET /usage without from: the 31 days up
// to to.
const defaultUsageDays = 31

// listUsage answers GET /usage: the stored usage rows, newest day first,
// at most store.MaxUsageRows, filtered by token, org, hostname and the
// days from..to (dates, UTC, both inclusive; to defaults to today, from
// to 30 days before to). A key sees its own organization's rows only, and
// may name no other in org.
func (a *API) listUsage(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	uq := store.UsageQuery{OrgID: c.scope()}
	var org string
	for _, f := range []struct {
		name string
		dst  *string
	}{{"token", &uq.TokenID}, {"org", &org}, {"hostname", &uq.Hostname}} {
		v := q.Get(f.name)
		if len(v) > store.MaxUsageField {
			return errorf(http.StatusBadRequest, "%s: %d bytes, at most %d", f.name, len(v), store.MaxUsageField)
		}
		*f.dst = v
	}
	switch {
	case c.master:
		uq.OrgID = org
	case org != "" && org != c.key.OrgID:
		return errorf(http.StatusBadRequest, "org may only name another organization with the master token: an admin key sees its own")
	}
	day := func(name string) (time.Time, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.DateOnly, v)
		if err != nil || len(v) != len(time.DateOnly) {
			return time.Time{}, errorf(http.StatusBadRequest, "%s %.32q is not a date (YYYY-MM-DD)", name, v)
		}
		return t, nil
	}
	from, err := day("from")
	if err != nil {
		return err
	}
	to, err := day("to")
	if err != nil {
		return err
	}
	if to.IsZero() {
		now := a.now().UTC()
		to = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
		if !from.IsZero() && from.After(to) {
			to = from // a day ahead of this server's clock: no rows, no error
		}
	}
	if from.IsZero() {
		from = to.AddDate(0, 0, -(defaultUsageDays - 1))
	}
	if to.Before(from) {
		return errorf(http.StatusBadRequest, "to %s is before from %s", to.Format(time.DateOnly), from.Format(time.DateOnly))
	}
	if n := int(to.Sub(from).Hours()/24) + 1; n > apitype.MaxUsageDays {
		return errorf(http.StatusBadRequest, "from %s to %s spans %d days, at most %d", from.Format(time.DateOnly), to.Format(time.DateOnly), n, apitype.MaxUsageDays)
	}
	uq.From, uq.To = from, to
	rows, err := a.store.QueryUsage(r.Context(), uq)
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, mapList(rows, usageRowOf))
	return nil
}

func usageRowOf(u store.UsageRow) apitype.UsageRow {
	return apitype.UsageRow{Day: u.Day.UTC().Format(time.DateOnly), TokenID: u.TokenID, OrgID: u.OrgID, Hostname: u.Hostname,
		Requests: u.Requests, Bytes: u.Bytes}
}
