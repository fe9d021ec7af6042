package autoscale

import (
	"fmt"
	"slices"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// masterArmer is the armer of the master token's declarations. It is
// bounded only by the per-organization cap: the operator's own client is
// not a tenant.
const masterArmer = apitype.Master

// quota counts the records the controller knows per organization and per
// armer, plus the creations in flight, so that a declaration over
// Config.MaxRecordsPerOrg or Config.MaxRecordsPerToken is refused in
// memory, before any store access. A flood of fresh hostnames therefore
// costs a map lookup per name once the caps are reached. Owned by the
// controller's owner goroutine.
type quota struct {
	orgs, armers       map[string]int // records known
	orgsHeld, armsHeld map[string]int // reservations of Declare calls in flight
}

// count adds sign (+1 or -1) times r to the counts; a nil r counts nothing.
func (q *quota) count(r *Record, sign int) {
	if r == nil {
		return
	}
	q.orgs = bump(q.orgs, r.OrgID, sign)
	for _, a := range r.ArmedBy {
		q.armers = bump(q.armers, a, sign)
	}
}

// bump adds d to m[k], dropping the key at zero, and returns m (made when
// nil).
func bump(m map[string]int, k string, d int) map[string]int {
	if m == nil {
		m = make(map[string]int)
	}
	if n := m[k] + d; n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
	return m
}

// reservation is one Declare call's claim on the caps until its write
// lands (and the record counts instead) or fails. release is idempotent.
type reservation struct {
	org, armer string // "" when nothing of the kind is reserved
}

// releaseLocked gives the reservation back.
func (q *quota) releaseLocked(r *reservation) {
	if r.org != "" {
		q.orgsHeld = bump(q.orgsHeld, r.org, -1)
		r.org = ""
	}
	if r.armer != "" {
		q.armsHeld = bump(q.armsHeld, r.armer, -1)
		r.armer = ""
	}
}

// admitLocked decides whether the armer's declaration for k may go on. It
// refuses with ErrBindTaken a new record when another organization holds
// one for the same hostname and path, and with ErrRecordLimit when the
// declaration would create a record beyond the organization's cap, or add
// the armer to a record beyond the token's cap. What it admits that is new
// is reserved: the caller must release the reservation once its write has
// been applied or has failed.
func (c *Controller) admitLocked(k bindKey, armer string) (reservation, error) {
	var rec *Record
	if b := c.binds[k]; b != nil {
		rec = b.rec
	}
	q := &c.quota
	var r reservation
	if rec == nil {
		// Only a new record is refused for a bind another organization
		// holds: when two servers raced and both organizations hold one,
		// each keeps declaring its own (the router decides which drives).
		for _, o := range c.byBind[hostPath{k.host, k.path}] {
			if o.key.org != k.org && o.rec != nil {
				return reservation{}, ErrBindTaken
			}
		}
		if n := q.orgs[k.org] + q.orgsHeld[k.org]; n >= c.cfg.MaxRecordsPerOrg {
			return reservation{}, fmt.Errorf("%w: the organization holds %d records (scaling_max_records_per_org %d)",
				ErrRecordLimit, n, c.cfg.MaxRecordsPerOrg)
		}
		r.org = k.org
	}
	if armer != masterArmer && (rec == nil || !slices.Contains(rec.ArmedBy, armer)) {
		if n := q.armers[armer] + q.armsHeld[armer]; n >= c.cfg.MaxRecordsPerToken {
			return reservation{}, fmt.Errorf("%w: the token arms %d records (scaling_max_records_per_token %d)",
				ErrRecordLimit, n, c.cfg.MaxRecordsPerToken)
		}
		r.armer = armer
	}
	if r.org != "" {
		q.orgsHeld = bump(q.orgsHeld, r.org, 1)
	}
	if r.armer != "" {
		q.armsHeld = bump(q.armsHeld, r.armer, 1)
	}
	return r, nil
}
