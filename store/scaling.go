package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
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

	// Scaling is the declaration, as the announcing client (or the admin
	// API) gave it: the one Go type of a scaling block, whose fields the
	// record promotes (r.URL, r.Min, ...). The store keeps it as given,
	// except that ColdStart, Window and Cooldown are kept to the
	// millisecond (finer parts are dropped on the way in) and a
	// TargetUtilization that is NaN or infinite is refused. The Secret is
	// returned as stored: keeping it out of API responses and logs is the
	// caller's job. Validating the block (tunnel.Scaling.Validate) is the
	// caller's job too: the store holds what its callers checked.
	tunnel.Scaling

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
	// LastError says why the last call failed, as given (at most
	// MaxScalingErrorBytes); "" after a success or before any call.
	LastError string
	// NextCallAt is when the record may be called again: the cooldown
	// after the last call, or the backoff after a failed one; nil means
	// at once. AcquireScalingLease refuses the lease before it.
	NextCallAt *time.Time
	// PenaltyUntil is when the provider may be called again after its
	// 429 answers or Retry-After, as they stood after the last call; nil
	// means none. AcquireScalingLease refuses the lease before it.
	PenaltyUntil *time.Time

	// CreatedAt is assigned by the store.
	CreatedAt time.Time
	// UpdatedAt is when the record was last declared (created or
	// refreshed), assigned by the store. Calls recorded with
	// RecordScalingCall do not move it.
	UpdatedAt time.Time
}

// equalDeclaration reports whether a and b declare the same thing: their
// Scaling blocks are equal.
// Conflict is not part of it: it is the caller's verdict on a declaration,
// not something a client declares.
func equalDeclaration(a, b ScalingRecord) bool {
	return a.Scaling == b.Scaling
}

// mergeScaling applies the declaration in d, made by armer at d.UpdatedAt,
// to the stored record old. It returns the record to store and whether the
// declaration changed. declareScaling calls it with old read under a
// write lock, so the merge and the write that follows are atomic.
func mergeScaling(old, d ScalingRecord, armer string, rearm bool) (rec ScalingRecord, changed bool) {
	rec = old
	changed = !equalDeclaration(old, d)
	rec.Scaling = d.Scaling
	rec.Conflict = d.Conflict
	rec.ArmedBy = list(old.ArmedBy)
	if !slices.Contains(rec.ArmedBy, armer) {
		rec.ArmedBy = append(rec.ArmedBy, armer)
	}
	if rearm {
		rec.Disarmed = false
		rec.ConsecutiveFailures = 0
		// The backoff of past failures is forgotten; the cooldown since
		// the last call, as now declared, still holds.
		rec.NextCallAt = nil
		if rec.LastCallAt != nil {
			rec.NextCallAt = new(rec.LastCallAt.Add(rec.Cooldown))
		}
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
// client session announcing the record, or a changed declaration) and
// sets NextCallAt to the end of the cooldown since the last call (nil
// without one), forgetting a backoff; when false it leaves the breaker
// and the call state alone. It never touches the last call
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
		ID:        newID("scl"),
		OrgID:     r.OrgID,
		Hostname:  r.Hostname,
		Path:      r.Path,
		Scaling:   r.Scaling,
		ArmedBy:   []string{armer},
		Conflict:  r.Conflict,
		CreatedAt: now,
		UpdatedAt: now,
	}
	fresh.ColdStart = fresh.ColdStart.Truncate(time.Millisecond)
	fresh.Window = fresh.Window.Truncate(time.Millisecond)
	fresh.Cooldown = fresh.Cooldown.Truncate(time.Millisecond)
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
	// so that the engines agree.
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

// MaxScalingErrorBytes bounds ScalingCall.Err: a longer text is cut, on
// a rune boundary.
const MaxScalingErrorBytes = 512

// ScalingCall is the outcome of one hook call, as RecordScalingCall
// stores it on its record.
type ScalingCall struct {
	// At is when the call ended; zero means now.
	At time.Time
	// Reason is the call's reason ("cold_start", "scale_out",
	// "scale_in"), kept as given.
	Reason string
	// Status is the HTTP status; 0 for a transport failure.
	Status int
	// Err says why the call failed; "" for a success. Cut to
	// MaxScalingErrorBytes.
	Err string
	// ConsecutiveFailures and Disarmed are the breaker after the call,
	// as the caller decided.
	ConsecutiveFailures int
	Disarmed            bool
	// NextCallAt ends the cooldown or backoff the call started; zero
	// means none. NextCallIn, when positive, wins: the cooldown or backoff
	// then ends NextCallIn after At, as the store's clock reads it.
	NextCallAt time.Time
	NextCallIn time.Duration
	// PenaltyUntil ends the provider's penalty or Retry-After; zero means
	// none. PenaltyFor, when positive, wins, as NextCallIn does.
	PenaltyUntil time.Time
	PenaltyFor   time.Duration
	// Generation is the generation of the lease the call was made under
	// (ScalingLease.Generation); 0 means none (a call made without the
	// lease). When the record's lease has been taken since with a higher
	// generation, the outcome is stale and not stored (see
	// RecordScalingCall).
	Generation int64
	// Holder is the lease holder that made the call (see
	// AcquireScalingLease): its lease of the record is released in the
	// same transaction, so that no server finds the lease free before it
	// can see the cooldown. "" releases nothing.
	Holder string
}

// RecordScalingCall stores the outcome of one hook call on the record id,
// in any organization, and returns the record: LastCallAt = c.At (zero
// means now, by the store's clock: see Clock), LastReason, LastStatus,
// LastError, ConsecutiveFailures, Disarmed, NextCallAt and PenaltyUntil as
// given or, with NextCallIn and PenaltyFor, counted from LastCallAt (the
// controller owns the breaker rule), and releases c.Holder's lease of the
// record. It leaves UpdatedAt alone and publishes ChangeScalingDisarmed
// when c.Disarmed is set, ChangeScalingCalled otherwise. The error wraps
// ErrNotFound when there is no such record (deleted while the call was in
// flight, say), and ErrConflict, storing nothing, when c.Generation is
// older than the record's latest lease: another server took the lease
// over and its call's outcome is the one that stands.
func (db *DB) RecordScalingCall(ctx context.Context, id string, c ScalingCall) (ScalingRecord, error) {
	if db.closed.Load() {
		return ScalingRecord{}, errClosed
	}
	if !c.At.IsZero() {
		c.At = stamp(c.At)
	}
	if c.NextCallIn < 0 || c.PenaltyFor < 0 || c.Generation < 0 {
		return ScalingRecord{}, fmt.Errorf("store: record scaling call: negative wait or generation")
	}
	if !c.NextCallAt.IsZero() {
		c.NextCallAt = stamp(c.NextCallAt)
	}
	if !c.PenaltyUntil.IsZero() {
		c.PenaltyUntil = stamp(c.PenaltyUntil)
	}
	if len(c.Err) > MaxScalingErrorBytes {
		c.Err = strings.ToValidUTF8(c.Err[:MaxScalingErrorBytes], "")
	}
	r, err := db.b.recordScalingCall(ctx, id, c)
	if err != nil {
		return ScalingRecord{}, db.fail("record scaling call on "+id, err)
	}
	return r, nil
}

// timePtr returns &t, or nil for a zero t.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// callChangeKind is the change a recorded call publishes:
// ChangeScalingDisarmed when it leaves the record disarmed, so that every
// server stops calling at once, ChangeScalingCalled otherwise.
func callChangeKind(c ScalingCall) string {
	if c.Disarmed {
		return ChangeScalingDisarmed
	}
	return ChangeScalingCalled
}

// MaxScalingLeaseTTL bounds a lease's duration. A stored lease expiring
// further in the future than this counts as expired: no stored row can
// make a lease block a record for longer. (Leases are stamped by the
// store's clock; rows written by older versions were stamped by each
// server's own.)
const MaxScalingLeaseTTL = 2 * time.Minute

// ScalingLease is one server's claim to call the provider for a record:
// while it lasts, no other server calls for it. It names the decision it
// calls for and that decision's Idempotency-Key.
type ScalingLease struct {
	// RecordID is the record's ID.
	RecordID string
	// Holder identifies the server process holding it; never "".
	Holder string
	// Reason, Current and Desired name the decision.
	Reason           string
	Current, Desired int
	// IdempotencyKey is the decision's key; never "".
	IdempotencyKey string
	// AcquiredAt and ExpiresAt are assigned by the store, by its clock.
	AcquiredAt, ExpiresAt time.Time
	// Generation is assigned by the store to each lease taken: one more
	// than any lease taken before it, for any record, so a record's
	// generations only ever rise. A call carries it so that a provider can
	// refuse a call made under a lease that was since taken over
	// (fencing).
	Generation int64

	// CallsPerMinute, in a request, is the calls-per-minute budget that
	// every server sharing the store draws from (see
	// AcquireScalingLease); 0 means none. Not stored.
	CallsPerMinute int
	// RetryAt, in a refusal for want of budget, is when the budget has a
	// call again; zero otherwise.
	RetryAt time.Time
}

// sameDecision reports whether a and b are leases for the same decision.
func (a ScalingLease) sameDecision(b ScalingLease) bool {
	return a.Reason == b.Reason && a.Current == b.Current && a.Desired == b.Desired
}

// AcquireScalingLease tries to take the lease of record l.RecordID for
// l's decision, for ttl (in (0, MaxScalingLeaseTTL]), in one transaction
// that serializes every server's attempt on the record. It returns the
// record in every case, and:
//
//   - ok and the lease as stored when it is taken: AcquiredAt is now and
//     ExpiresAt now+ttl, by the store's clock (Clock), read once the
//     record is locked; Generation is the next lease generation. When it
//     takes over a lease for the same decision that expired less than
//     that lease's own lifetime ago (or the holder's own live one), that
//     lease's IdempotencyKey is kept, so a server taking over from one
//     that died sends the key the provider may already have seen: use the
//     returned key. An older lease row, left by a holder that stopped
//     long ago, gives nothing: a later decision is a new decision, with
//     its own key.
//   - not ok and the holding lease when another holder's lease is live:
//     not yet expired, and expiring no later than now+MaxScalingLeaseTTL.
//   - not ok and a zero lease when the record is disarmed, or its
//     NextCallAt or PenaltyUntil is after now: a call was made (by any
//     server) and its cooldown, backoff or penalty runs.
//   - not ok and a lease with only RetryAt set when l.CallsPerMinute is
//     positive and the budget shared by every server is spent: a token
//     bucket of that capacity, refilled by l.CallsPerMinute/60 a second,
//     starting with one call. A lease taken takes one call from it.
//
// The error wraps ErrNotFound when there is no such record.
func (db *DB) AcquireScalingLease(ctx context.Context, l ScalingLease, ttl time.Duration) (ScalingLease, ScalingRecord, bool, error) {
	if db.closed.Load() {
		return ScalingLease{}, ScalingRecord{}, false, errClosed
	}
	var errs []error
	if l.RecordID == "" || l.Holder == "" || l.IdempotencyKey == "" {
		errs = append(errs, errors.New("store: acquire scaling lease: empty record, holder or key"))
	}
	if ttl <= 0 || ttl > MaxScalingLeaseTTL {
		errs = append(errs, fmt.Errorf("store: acquire scaling lease: ttl %v is not in (0,%v]", ttl, MaxScalingLeaseTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return ScalingLease{}, ScalingRecord{}, false, err
	}
	if l.CallsPerMinute < 0 || l.CallsPerMinute > maxCallsPerMinute {
		return ScalingLease{}, ScalingRecord{}, false, fmt.Errorf("store: acquire scaling lease: calls per minute %d is not in [0,%d]", l.CallsPerMinute, maxCallsPerMinute)
	}
	l.AcquiredAt, l.ExpiresAt, l.Generation, l.RetryAt = time.Time{}, time.Time{}, 0, time.Time{}
	got, rec, ok, err := db.b.acquireScalingLease(ctx, l, ttl)
	if err != nil {
		return ScalingLease{}, ScalingRecord{}, false, db.fail("acquire scaling lease on "+l.RecordID, err)
	}
	return got, rec, ok, nil
}

// leaseVerdict decides an acquisition of want at now (the store's clock)
// on rec, whose current lease is held (nil: none), for ttl. It returns the
// lease to store when ok (its Generation still to be assigned), or else
// the lease that stands in the way (zero when the record's own state
// refuses). acquireScalingLease calls it with rec and held read under a
// lock on the record.
//
// The decision's key is inherited only by a genuine takeover: held names
// the same decision and expired less than its own lifetime ago (or is the
// holder's own, still live).
func leaseVerdict(rec ScalingRecord, held *ScalingLease, want ScalingLease, now time.Time, ttl time.Duration) (ScalingLease, bool) {
	if rec.Disarmed || (rec.NextCallAt != nil && rec.NextCallAt.After(now)) ||
		(rec.PenaltyUntil != nil && rec.PenaltyUntil.After(now)) {
		return ScalingLease{}, false
	}
	if h := held; h != nil {
		live := h.ExpiresAt.After(now) && !h.ExpiresAt.After(now.Add(MaxScalingLeaseTTL))
		if live && h.Holder != want.Holder {
			return *h, false
		}
		lifetime := h.ExpiresAt.Sub(h.AcquiredAt)
		if h.sameDecision(want) && (live || now.Before(h.ExpiresAt.Add(lifetime))) {
			want.IdempotencyKey = h.IdempotencyKey
		}
	}
	want.AcquiredAt, want.ExpiresAt = now, now.Add(ttl)
	return want, true
}

// maxCallsPerMinute bounds ScalingLease.CallsPerMinute (autoscale's
// MaxCallsPerMinuteLimit).
const maxCallsPerMinute = 1_000_000

// budgetUnitsPerToken is one call of the shared budget, in the units it
// is stored in: the bucket gains perMinute units a nanosecond, so its
// refill is exact integer arithmetic.
const budgetUnitsPerToken = int64(time.Minute)

// takeBudget takes one call from the shared budget of perMinute calls a
// minute, which held units at at (nil: never used, so it holds one call
// at now). It returns the units left at now and true, or the units at now
// and when a call will be there.
func takeBudget(units int64, at *time.Time, perMinute int, now time.Time) (int64, bool, time.Time) {
	pm := int64(max(1, perMinute))
	full := pm * budgetUnitsPerToken
	switch {
	case at == nil:
		units = budgetUnitsPerToken
	case now.Sub(*at) >= time.Minute:
		units = full
	case now.After(*at):
		units = min(full, units+int64(now.Sub(*at))*pm)
	}
	units = min(units, full)
	if units >= budgetUnitsPerToken {
		return units - budgetUnitsPerToken, true, time.Time{}
	}
	need := budgetUnitsPerToken - units
	return units, false, now.Add(time.Duration((need + pm - 1) / pm))
}

// Clock returns the store's clock: the database's own (PostgreSQL's
// clock_timestamp(), or SQLite's 'now' on the host that holds the file),
// unless Config.Now replaces it. Every cluster-wide scaling time (leases,
// cooldowns, backoffs, penalties, the calls-per-minute budget) is decided
// by it, so servers whose clocks disagree still agree on those; a server
// compares its own clock with this one to convert.
func (db *DB) Clock(ctx context.Context) (time.Time, error) {
	if db.closed.Load() {
		return time.Time{}, errClosed
	}
	t, err := db.b.clock(ctx)
	if err != nil {
		return time.Time{}, db.fail("read the clock", err)
	}
	return t, nil
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
