package autoscale

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
)

// View is one record as the API shows it: the declaration, the breaker,
// the last call and the live pool. It never holds the secret.
type View struct {
	ID, OrgID, Hostname, Path string
	// URL is the hook URL.
	URL string
	// Authenticated says a secret is set; the secret itself is never shown.
	Authenticated bool
	Min, Max      int
	ColdStart     time.Duration
	// TargetUtilization is the scale-out threshold, in (0,1].
	TargetUtilization float64
	Window, Cooldown  time.Duration
	// Instances, Capacity and Inflight are the live pool (see PoolStats).
	Instances, Capacity, Inflight int
	// Utilization is Inflight/Capacity; meaningless (and encoded as null)
	// when Capacity is 0.
	Utilization         float64
	Disarmed            bool
	Conflict            bool
	ConsecutiveFailures int
	// LastCallAt is nil when no call was made.
	LastCallAt *time.Time
	LastReason string
	// LastStatus is 0 for a transport failure or no call.
	LastStatus int
	// LastError says why the last call failed; "" after a success or
	// before any call (kept in the store).
	LastError string
	// NextCallAt ends the cooldown or backoff; nil when none runs.
	NextCallAt *time.Time
	// Refused says why the latest declaration a live client sent for the
	// bind was refused (an invalid block, a hook URL the outbound policy
	// refuses); "" when it was not. A record keeps its older block then;
	// a bind with no record is listed with no ID, disarmed.
	Refused   string
	UpdatedAt time.Time
}

// newView shows r with the live pool st.
func newView(r Record, st PoolStats) View {
	r = withDefaultMax(r)
	v := View{
		ID: r.ID, OrgID: r.OrgID, Hostname: r.Hostname, Path: r.Path,
		URL: r.URL, Authenticated: r.Secret != "",
		Min: r.Min, Max: r.Max, ColdStart: r.ColdStart,
		TargetUtilization: r.TargetUtilization, Window: r.Window, Cooldown: r.Cooldown,
		Instances: st.Instances, Capacity: st.Capacity, Inflight: st.Inflight,
		Disarmed: r.Disarmed, Conflict: r.Conflict, ConsecutiveFailures: r.ConsecutiveFailures,
		LastCallAt: r.LastCallAt, LastReason: r.LastReason, LastStatus: r.LastStatus,
		LastError: r.LastError, NextCallAt: r.NextCallAt,
		UpdatedAt: r.UpdatedAt,
	}
	if st.Capacity > 0 {
		v.Utilization = float64(st.Inflight) / float64(st.Capacity)
	}
	return v
}

// List returns the records of orgID ("" means every organization), the
// most recently declared first, disarmed ones included, each with its live
// pool. It reads the store, so it also shows other servers' changes.
func (c *Controller) List(ctx context.Context, orgID string) ([]View, error) {
	recs, err := c.store.ListScalingRecords(ctx, orgID)
	if err != nil {
		return nil, fmt.Errorf("autoscale: list: %w", err)
	}
	refused := c.refused.of(orgID)
	vs := make([]View, 0, len(recs)+len(refused))
	for _, r := range recs {
		v := newView(r, c.pool.Pool(r.OrgID, r.Hostname, r.Path))
		k := bindKey{r.OrgID, r.Hostname, r.Path}
		if rf, ok := refused[k]; ok {
			v.Refused = rf.reason
			delete(refused, k)
		}
		vs = append(vs, v)
	}
	// Refused binds without a record come last: they were never declared.
	for _, k := range slices.SortedFunc(maps.Keys(refused), compareBindKeys) {
		vs = append(vs, refusedView(k, refused[k], c.pool.Pool(k.org, k.host, k.path)))
	}
	return vs, nil
}

// refusedView shows the refused declaration rf of bind k, which has no
// record: no ID, disarmed, with the reason.
func refusedView(k bindKey, rf refusal, st PoolStats) View {
	d := rf.decl
	v := newView(Record{OrgID: k.org, Hostname: k.host, Path: k.path, Scaling: d, Disarmed: true}, st)
	v.Refused = rf.reason
	return v
}

// compareBindKeys orders binds by organization, hostname and path.
func compareBindKeys(a, b bindKey) int {
	return cmp.Or(strings.Compare(a.org, b.org), strings.Compare(a.host, b.host), strings.Compare(a.path, b.path))
}

// Disarm removes record id of orgID ("" means any organization): the API's
// disarm. A client still declaring the block creates it again on its next
// announcement. The error wraps ErrNoRecord (and store.ErrNotFound) when
// there is no such record.
func (c *Controller) Disarm(ctx context.Context, orgID, id string) error {
	if err := c.store.DeleteScalingRecord(ctx, orgID, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("autoscale: disarm %s: %w (%w)", id, ErrNoRecord, err)
		}
		return fmt.Errorf("autoscale: disarm %s: %w", id, err)
	}
	c.forgetRecord(id)
	c.log.Info("scaling record deleted", logkey.RecordID, id, logkey.OrgID, orgID)
	return nil
}

// forgetRecord drops record id from memory: it was deleted.
func (c *Controller) forgetRecord(id string) {
	// Failing, the owner has stopped: there is nothing left to forget.
	_ = c.do(context.Background(), func() {
		if b := c.byID[id]; b != nil {
			c.setRecLocked(b, nil)
			c.landLocked(b)
			c.gcLocked(b)
		}
	})
}

// MarshalJSON encodes v as the API's scaling record, apitype.ScalingRecord:
// the contract's snake_case keys, durations in Go syntax ("45s"),
// utilization null when the pool has no measurable capacity, and
// "authenticated" in place of the secret.
func (v View) MarshalJSON() ([]byte, error) {
	return json.Marshal(v.Wire())
}

// Wire returns v as the API's scaling record, as MarshalJSON encodes it.
func (v View) Wire() apitype.ScalingRecord {
	var util *float64
	if v.Capacity > 0 {
		util = &v.Utilization
	}
	return apitype.ScalingRecord{
		ID: v.ID, Hostname: v.Hostname, Path: v.Path, OrgID: v.OrgID,
		URL: v.URL, Authenticated: v.Authenticated, Min: v.Min, Max: v.Max,
		ColdStart: v.ColdStart.String(), TargetUtilization: v.TargetUtilization,
		Window: v.Window.String(), Cooldown: v.Cooldown.String(),
		Instances: v.Instances, Capacity: v.Capacity, Inflight: v.Inflight, Utilization: util,
		Disarmed: v.Disarmed, Conflict: v.Conflict, ConsecutiveFailures: v.ConsecutiveFailures,
		LastCallAt: v.LastCallAt, LastReason: v.LastReason, LastStatus: v.LastStatus,
		LastError: v.LastError, NextCallAt: v.NextCallAt, Refused: v.Refused,
		UpdatedAt: v.UpdatedAt,
	}
}
