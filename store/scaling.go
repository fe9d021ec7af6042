package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ScalingRecord is a persisted autoscaling declaration for one bind
// (organization, hostname, path prefix): where to call for capacity, within
// which limits, and what became of the last call. It outlives the clients
// that announced it, so that a request can cold start a service nothing is
// running for.
//
// The declaration fields (URL to TargetUtilization) come from the announcing
// client; Conflict is the caller's verdict on the announcement; the breaker
// and call fields (Disarmed to LastStatus) belong to the controller and
// change only through RecordScalingCall, or through a re-arming
// DeclareScaling.
type ScalingRecord struct {
	// ID is assigned by the store ("scl_…").
	ID string
	// OrgID is the owning organization; it must exist. (OrgID, Hostname,
	// Path) is unique.
	OrgID string
	// Hostname is the bound hostname, as the caller normalized it.
	Hostname string
	// Path is the bound path prefix, as the caller normalized it; ""
	// means none.
	Path string

	// URL is the hook the controller calls.
	URL string
	// Secret is sent as the hook's bearer token; "" means none. The store
	// keeps and returns it as given: keeping it out of API responses and
	// logs is the caller's job.
	Secret string
	// Min and Max bound the desired capacity the controller asks for
	// (instances). The store keeps them as given.
	Min, Max int
	// ColdStart, Window and Cooldown are kept to the millisecond: finer
	// parts are dropped on the way in.
	ColdStart, Window, Cooldown time.Duration
	// TargetUtilization is the fraction of capacity in use above which the
	// pool scales out. NaN and infinities are refused.
	TargetUtilization float64

	// ArmedBy lists the IDs of the tokens that announced the record ("master"
	// for the master token), in the order they first did, without
	// duplicates. Never empty once stored: a record whose last armer is
	// released is deleted.
	ArmedBy []string
	// Conflict says that two live clients declared different blocks for
	// the bind and the newest won. Set by the caller on each DeclareScaling.
	Conflict bool

	// Disarmed says the breaker tripped: the record is not called until it
	// is re-armed.
	Disarmed bool
	// ConsecutiveFailures counts the failed calls since the last success
	// or re-arm.
	ConsecutiveFailures int
	// LastCallAt is when the last call was made; nil means never.
	LastCallAt *time.Time
	// LastReason is the reason of the last call ("cold_start", "scale_out",
	// "scale_in"), kept as given; "" means none.
	LastReason string
	// LastStatus is the HTTP status of the last call; 0 means a transport
	// failure, or no call yet.
	LastStatus int

	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// UpdatedAt is when the record was last declared (created or
	// refreshed), assigned by the store. Calls recorded with
	// RecordScalingCall do not move it.
	UpdatedAt time.Time
}

// equalDeclaration reports whether a and b declare the same thing: URL,
// Secret, Min, Max, ColdStart, Window, Cooldown and TargetUtilization.
// Conflict is not part of it: it is the caller's verdict on a declaration,
// not something a client declares.
func equalDeclaration(a, b ScalingRecord) bool {
	return a.URL == b.URL && a.Secret == b.Secret &&
		a.Min == b.Min && a.Max == b.Max &&
		a.ColdStart == b.ColdStart && a.Window == b.Window && a.Cooldown == b.Cooldown &&
		a.TargetUtilization == b.TargetUtilization
}

// mergeScaling applies the declaration in d, made by armer at d.UpdatedAt,
// to the stored record old. It returns the record to store and whether the
// declaration changed. Each backend calls it with old read under a write
// lock, so the merge and the write that follows are atomic.
func mergeScaling(old, d ScalingRecord, armer string, rearm bool) (rec ScalingRecord, changed bool) {
	rec = old
	changed = !equalDeclaration(old, d)
	rec.URL, rec.Secret = d.URL, d.Secret
	rec.Min, rec.Max = d.Min, d.Max
	rec.ColdStart, rec.Window, rec.Cooldown = d.ColdStart, d.Window, d.Cooldown
	rec.TargetUtilization = d.TargetUtilization
	rec.Conflict = d.Conflict
	rec.ArmedBy = list(old.ArmedBy)
	if !slices.Contains(rec.ArmedBy, armer) {
		rec.ArmedBy = append(rec.ArmedBy, armer)
	}
	if rearm {
		rec.Disarmed = false
		rec.ConsecutiveFailures = 0
	}
	rec.UpdatedAt = d.UpdatedAt
	return rec, changed
}

// DeclareScaling creates the record for r's bind (r.OrgID, r.Hostname,
// r.Path) or refreshes it, and returns it as stored.
//
// It stores r's declaration fields and Conflict, adds armer (a token ID, or
// "master"; never "") to ArmedBy when absent, and sets UpdatedAt to now.
// When rearm is true it also clears Disarmed and ConsecutiveFailures (a new
// client session announcing the record, or a changed declaration); when
// false it leaves the breaker alone. It never touches the last call
// (LastCallAt, LastReason, LastStatus). A new record starts armed, with no
// call. r's ID, ArmedBy, breaker, call and time fields are ignored.
//
// changed reports whether the declaration (URL, Secret, Min, Max,
// ColdStart, Window, Cooldown, TargetUtilization; not Conflict) differs from
// what was stored; it is true when the record is new.
//
// Every call publishes ChangeScalingUpdated, since every call moves
// UpdatedAt. Servers declaring one bind at once end with one record holding
// every armer. The error wraps ErrNotFound when r.OrgID does not exist.
func (db *DB) DeclareScaling(ctx context.Context, r ScalingRecord, armer string, rearm bool) (rec ScalingRecord, changed bool, err error) {
	if db.closed.Load() {
		return ScalingRecord{}, false, errClosed
	}
	if err := checkDeclaration(r, armer); err != nil {
		return ScalingRecord{}, false, err
	}
	now := stamp(db.now())
	fresh := ScalingRecord{
		ID:                newID("scl"),
		OrgID:             r.OrgID,
		Hostname:          r.Hostname,
		Path:              r.Path,
		URL:               r.URL,
		Secret:            r.Secret,
		Min:               r.Min,
		Max:               r.Max,
		ColdStart:         r.ColdStart.Truncate(time.Millisecond),
		Window:            r.Window.Truncate(time.Millisecond),
		Cooldown:          r.Cooldown.Truncate(time.Millisecond),
		TargetUtilization: r.TargetUtilization,
		ArmedBy:           []string{armer},
		Conflict:          r.Conflict,
		CreatedAt:         now,
		UpdatedAt:         now,
	}
	rec, changed, err = db.b.declareScaling(ctx, fresh, armer, rearm)
	if err != nil {
		return ScalingRecord{}, false, db.fail(fmt.Sprintf("declare scaling for %s%s", r.Hostname, r.Path), err)
	}
	return rec, changed, nil
}

// checkDeclaration validates what DeclareScaling needs.
func checkDeclaration(r ScalingRecord, armer string) error {
	var errs []error
	if r.OrgID == "" {
		errs = append(errs, errors.New("store: declare scaling: empty org"))
	}
	if r.Hostname == "" {
		errs = append(errs, errors.New("store: declare scaling: empty hostname"))
	}
	if r.URL == "" {
		errs = append(errs, errors.New("store: declare scaling: empty url"))
	}
	if armer == "" {
		errs = append(errs, errors.New("store: declare scaling: empty armer"))
	}
	// SQLite would store NaN as NULL and PostgreSQL keep it: refuse both
	// so that the backends agree.
	if math.IsNaN(r.TargetUtilization) || math.IsInf(r.TargetUtilization, 0) {
		errs = append(errs, fmt.Errorf("store: declare scaling: target utilization %v is not a finite number", r.TargetUtilization))
	}
	return errors.Join(errs...)
}

// ScalingRecord returns the record with the given ID in organization orgID
// ("" means any organization), or an error wrapping ErrNotFound.
func (db *DB) ScalingRecord(ctx context.Context, orgID, id string) (ScalingRecord, error) {
	if db.closed.Load() {
		return ScalingRecord{}, errClosed
	}
	r, err := db.b.scalingRecord(ctx, orgID, id)
	if err != nil {
		return ScalingRecord{}, db.fail("scaling record "+id, err)
	}
	return r, nil
}

// ScalingRecordByBind returns the record of hostname and path in
// organization orgID, or an error wrapping ErrNotFound. orgID "" means any
// organization (a cold start knows only the hostname and path); should
// several organizations hold the bind, the most recently declared record
// is returned.
func (db *DB) ScalingRecordByBind(ctx context.Context, orgID, hostname, path string) (ScalingRecord, error) {
	if db.closed.Load() {
		return ScalingRecord{}, errClosed
	}
	r, err := db.b.scalingRecordByBind(ctx, orgID, hostname, path)
	if err != nil {
		return ScalingRecord{}, db.fail(fmt.Sprintf("scaling record for %s%s", hostname, path), err)
	}
	return r, nil
}

// ListScalingRecords returns the records of organization orgID ("" means
// all), the most recently declared first, disarmed ones included.
func (db *DB) ListScalingRecords(ctx context.Context, orgID string) ([]ScalingRecord, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	rs, err := db.b.listScalingRecords(ctx, orgID)
	if err != nil {
		return nil, db.fail("list scaling records", err)
	}
	return rs, nil
}

// RecordScalingCall stores the outcome of one hook call on the record id,
// in any organization, and returns the record: LastCallAt = at (zero means
// now), LastReason, LastStatus, and ConsecutiveFailures and Disarmed as
// given (the controller owns the breaker rule). It leaves UpdatedAt alone
// and publishes ChangeScalingDisarmed when disarmed is set,
// ChangeScalingUpdated otherwise. The error wraps ErrNotFound when
// there is no such record (deleted while the call was in flight, say).
func (db *DB) RecordScalingCall(ctx context.Context, id string, at time.Time, reason string, status, consecutiveFailures int, disarmed bool) (ScalingRecord, error) {
	if db.closed.Load() {
		return ScalingRecord{}, errClosed
	}
	if at.IsZero() {
		at = db.now()
	}
	c := scalingCall{at: stamp(at), reason: reason, status: status, failures: consecutiveFailures, disarmed: disarmed}
	r, err := db.b.recordScalingCall(ctx, id, c)
	if err != nil {
		return ScalingRecord{}, db.fail("record scaling call on "+id, err)
	}
	return r, nil
}

// scalingCall is what RecordScalingCall stores.
type scalingCall struct {
	at       time.Time
	reason   string
	status   int
	failures int
	disarmed bool
}

// callChangeKind is the change a recorded call publishes:
// ChangeScalingDisarmed when it leaves the record disarmed, so that every
// server stops calling at once, ChangeScalingUpdated otherwise.
func callChangeKind(c scalingCall) string {
	if c.disarmed {
		return ChangeScalingDisarmed
	}
	return ChangeScalingUpdated
}

// DeleteScalingRecord deletes the record (the admin API's disarm) and
// publishes ChangeScalingDeleted. The error wraps ErrNotFound when no such
// record is in orgID ("" means any organization).
func (db *DB) DeleteScalingRecord(ctx context.Context, orgID, id string) error {
	if db.closed.Load() {
		return errClosed
	}
	if err := db.b.deleteScalingRecord(ctx, orgID, id); err != nil {
		return db.fail("delete scaling record "+id, err)
	}
	return nil
}

// ReleaseScalingArmer removes armer (a revoked or expired token's ID) from
// the ArmedBy of every record and deletes the records it leaves with no
// armer. It returns the deleted records' IDs, sorted, never nil, and
// publishes, in record ID order, ChangeScalingDeleted for each of them and
// ChangeScalingUpdated for each record that keeps other armers (its
// UpdatedAt unchanged). Releasing an armer that armed
// nothing changes nothing. A record being declared concurrently by another
// armer survives with that armer.
func (db *DB) ReleaseScalingArmer(ctx context.Context, armer string) ([]string, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	if armer == "" {
		return nil, errors.New("store: release scaling armer: empty armer")
	}
	ids, err := db.b.releaseScalingArmer(ctx, armer)
	if err != nil {
		return nil, db.fail("release scaling armer "+armer, err)
	}
	return ids, nil
}

// DeleteStaleScalingRecords deletes the records last declared before cutoff
// (the scaling_record_ttl sweep). It returns their IDs, sorted, never nil,
// and publishes ChangeScalingDeleted for each, in that order. A record refreshed
// concurrently to cutoff or later survives.
func (db *DB) DeleteStaleScalingRecords(ctx context.Context, cutoff time.Time) ([]string, error) {
	if db.closed.Load() {
		return nil, errClosed
	}
	// Stored times are whole microseconds, so "before cutoff" is "before
	// cutoff rounded up to the microsecond".
	c := stamp(cutoff)
	if c.Before(cutoff) {
		c = c.Add(time.Microsecond)
	}
	ids, err := db.b.deleteStaleScalingRecords(ctx, c)
	if err != nil {
		return nil, db.fail("delete stale scaling records", err)
	}
	return ids, nil
}

// releaseArmer returns armedBy without armer, never nil.
func releaseArmer(armedBy []string, armer string) []string {
	return slices.DeleteFunc(list(armedBy), func(a string) bool { return a == armer })
}

// scalingChange names r in a change of kind.
func scalingChange(kind string, r ScalingRecord) Change {
	return Change{Kind: kind, ID: r.ID, OrgID: r.OrgID, Hostname: r.Hostname}
}
