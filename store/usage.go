package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// UsageDelta is an increment of the usage of one token, organization and
// hostname on one UTC day.
type UsageDelta struct {
	// Day is the UTC day; only its date counts.
	Day time.Time
	// TokenID is "" for the master token.
	TokenID, OrgID, Hostname string
	// Bytes and Requests are added; neither may be negative.
	Bytes, Requests int64
}

// UsageRow is one stored row: a day's totals of one token, organization
// and hostname, over every server.
type UsageRow = UsageDelta

// Bounds of the usage calls' input.
const (
	// MaxUsageDeltas bounds the deltas of one AddUsage call.
	MaxUsageDeltas = 100_000
	// MaxUsageField bounds the length in bytes of a token, organization
	// or hostname in a delta or a query.
	MaxUsageField = 512
	// MaxUsageIDs bounds the tokens and the organizations of one
	// UsageTotals call.
	MaxUsageIDs = 100_000
	// MaxUsageRows bounds the rows QueryUsage returns.
	MaxUsageRows = 10_000
)

// usageDay returns t's UTC date at midnight.
func usageDay(t time.Time) time.Time {
	u := t.UTC()
	return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
}

// AddUsage adds every delta to the stored totals in one transaction: an
// increment, so that servers sharing a database add up. A negative count,
// an overlong field or more than MaxUsageDeltas deltas is refused before
// the database sees them.
func (db *DB) AddUsage(ctx context.Context, ds []UsageDelta) error {
	if db.closed.Load() {
		return errClosed
	}
	if len(ds) > MaxUsageDeltas {
		return fmt.Errorf("store: add usage: %d deltas, at most %d", len(ds), MaxUsageDeltas)
	}
	out := make([]UsageDelta, 0, len(ds))
	for _, d := range ds {
		if d.Bytes < 0 || d.Requests < 0 {
			return fmt.Errorf("store: add usage: negative count (%d bytes, %d requests)", d.Bytes, d.Requests)
		}
		if len(d.TokenID) > MaxUsageField || len(d.OrgID) > MaxUsageField || len(d.Hostname) > MaxUsageField {
			return fmt.Errorf("store: add usage: a field longer than %d bytes", MaxUsageField)
		}
		if d.Bytes == 0 && d.Requests == 0 {
			continue
		}
		d.Day = usageDay(d.Day)
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil
	}
	if err := db.b.addUsage(ctx, out); err != nil {
		return db.fail("add usage", err)
	}
	return nil
}

// UsageTotals returns the stored bytes of each of tokens on day and of
// each of orgs in the month starting at month (UTC). An ID without usage
// is missing from the maps, which are never nil.
func (db *DB) UsageTotals(ctx context.Context, day, month time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	if db.closed.Load() {
		return nil, nil, errClosed
	}
	if len(tokens) > MaxUsageIDs || len(orgs) > MaxUsageIDs {
		return nil, nil, fmt.Errorf("store: usage totals: more than %d ids", MaxUsageIDs)
	}
	m := month.UTC()
	from := time.Date(m.Year(), m.Month(), 1, 0, 0, 0, 0, time.UTC)
	tt, ot, err := db.b.usageTotals(ctx, usageDay(day), from, from.AddDate(0, 1, 0), tokens, orgs)
	if err != nil {
		return nil, nil, db.fail("usage totals", err)
	}
	return tt, ot, nil
}

// UsageQuery selects rows for QueryUsage. Every field is a filter its zero
// value turns off.
type UsageQuery struct {
	OrgID, TokenID, Hostname string
	// From and To bound the day: From <= Day <= To (dates, UTC).
	From, To time.Time
}

// QueryUsage returns the rows q selects, newest day first, at most
// MaxUsageRows.
func (db *DB) QueryUsage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if len(q.OrgID) > MaxUsageField || len(q.TokenID) > MaxUsageField || len(q.Hostname) > MaxUsageField {
		return nil, fmt.Errorf("store: query usage: a filter longer than %d bytes", MaxUsageField)
	}
	if !q.From.IsZero() && !q.To.IsZero() && q.To.Before(q.From) {
		return nil, errors.New("store: query usage: to before from")
	}
	if !q.From.IsZero() {
		q.From = usageDay(q.From)
	}
	if !q.To.IsZero() {
		q.To = usageDay(q.To)
	}
	rows, err := db.b.queryUsage(ctx, q, MaxUsageRows)
	if err != nil {
		return nil, db.fail("query usage", err)
	}
	return rows, nil
}
