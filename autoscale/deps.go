package autoscale

import (
	"context"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/store"
)

// Record is a persisted scaling declaration for one bind, with its breaker
// and last call. It is an alias of the store's type, so *store.DB satisfies
// Store as it is; the controller never hands the Secret beyond Caller.
type Record = store.ScalingRecord

// Store is the persistence the controller uses: exactly the methods of
// *store.DB it calls. Implementations must be safe for concurrent use and
// follow the store's contract:
//
//   - DeclareScaling upserts the record of r's bind (r.OrgID, r.Hostname,
//     r.Path) with r's declaration fields and Conflict, adds armer to
//     ArmedBy, and with rearm clears Disarmed and ConsecutiveFailures; it
//     leaves the last call alone.
//   - ScalingRecordByBind and DeleteScalingRecord wrap store.ErrNotFound
//     when there is no such record; ListScalingRecords with orgID ""
//     lists every organization.
//   - RecordScalingCall stores a call's outcome, the breaker and the call
//     state (next call, penalty) as given, releases the holder's lease of
//     the record in the same write, and wraps store.ErrNotFound when the
//     record is gone.
//   - AcquireScalingLease takes the record's lease for a decision, for a
//     bounded time, unless another holder's lease is live or the record
//     is disarmed or in its cooldown, backoff or penalty; taking over an
//     expired lease of the same decision keeps its key only within that
//     lease's lifetime after its expiry, every lease taken gets a
//     generation above every earlier one, and a lease request with
//     CallsPerMinute draws from the budget every server shares (see
//     store.DB.AcquireScalingLease).
//   - Clock is the store's clock, by which every time above is decided;
//     RecordScalingCall stamps a zero At with it, and counts NextCallIn
//     and PenaltyFor from it.
type Store interface {
	Clock(ctx context.Context) (time.Time, error)
	DeclareScaling(ctx context.Context, r Record, armer string, rearm bool) (Record, bool, error)
	ScalingRecordByBind(ctx context.Context, orgID, hostname, path string) (Record, error)
	ListScalingRecords(ctx context.Context, orgID string) ([]Record, error)
	RecordScalingCall(ctx context.Context, id string, c store.ScalingCall) (Record, error)
	AcquireScalingLease(ctx context.Context, l store.ScalingLease, ttl time.Duration) (store.ScalingLease, Record, bool, error)
	DeleteScalingRecord(ctx context.Context, orgID, id string) error
	AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
}

// changeSource is what a Store may also offer (*store.DB does): a feed of
// committed changes from every server sharing the database. With it, a
// record created or deleted elsewhere is picked up at once instead of at
// the next periodic refresh.
type changeSource interface {
	Subscribe(ctx context.Context) <-chan store.Change
}

// PoolStats are the live figures of one bind's pool.
//
// The router must count only clients that are capacity: primary tier
// (priority 0), routable, not draining, not disabled and passing their
// backend probe. Standby clients exist to be idle, and counting them, or a
// draining or unhealthy client, would mask the saturation of the rest.
// The controller trusts these figures as given.
type PoolStats struct {
	// Instances counts client processes (distinct instance IDs, not
	// connections) with a routable primary-tier service in the pool. It
	// is "current" in every call.
	Instances int
	// Capacity sums those services' effective max_concurrent (a learnt
	// limit is announced as max_concurrent and counts). 0 means
	// utilization is not measurable: no max_concurrent announced, or an
	// unbounded service among them, whose in-flight requests would
	// otherwise be measured against capacity it does not add. The pool is
	// then never scaled out or in, and only cold starts apply.
	Capacity int
	// Inflight sums the permits those services hold right now.
	Inflight int
	// Routable counts the clients, of any tier, that could take a request
	// right now. A cold start still queued when it turns positive is not
	// made: the pool is no longer empty.
	Routable int
}

// PoolView is the router's live view of each bind's pool. Pool must not
// block and must be safe for concurrent use; the controller calls it once a
// second per armed record, and never while holding its own lock, so the
// router may call into the controller while holding its own.
type PoolView interface {
	Pool(orgID, hostname, path string) PoolStats
}

// HookCall is one call to a provider's scaling hook.
type HookCall struct {
	// URL is the record's hook URL, not yet checked against the fence.
	URL string
	// Secret goes out as "Authorization: Bearer" when not empty. It must
	// never be logged.
	Secret string
	// IdempotencyKey goes out as the Idempotency-Key header. It is the
	// same for every attempt of one decision.
	IdempotencyKey string
	// Body is the JSON body; encode it with MarshalBody.
	Body HookBody
}

// Caller makes the outbound hook call: POST, the fence, User-Agent,
// Authorization, Idempotency-Key, no redirects, the response body never
// read. Call returns the HTTP status (0 when there was no response), the
// Retry-After the response carried (see ParseRetryAfter; 0 when none) and
// an error for anything that is not a response: a fence refusal, a
// transport failure or ctx ending. Any 2xx status counts as accepted.
// Call must honor ctx; the controller also bounds it with
// Config.CallTimeout. It must be safe for concurrent use.
type Caller interface {
	Call(ctx context.Context, c HookCall) (status int, retryAfter time.Duration, err error)
}

// Event types, also used as the audit log's event names: the webhook
// events of internal/control/apitype, under the autoscaler's names.
const (
	// EventRequested is a call the provider accepted (2xx).
	EventRequested = apitype.EventScalingRequested
	// EventFailed is a call that failed: a non-2xx answer, a timeout, a
	// fence refusal or a transport error.
	EventFailed = apitype.EventScalingFailed
	// EventDisarmed is the breaker tripping after MaxFailures consecutive
	// failures; the record is not called again until re-armed.
	EventDisarmed = apitype.EventScalingDisarmed
)

// EventTypes returns every Event.Type the controller emits, in a fixed
// order: the names a webhook may subscribe to.
func EventTypes() []string {
	return []string{EventRequested, EventFailed, EventDisarmed}
}

// Event is what the controller reports for webhook delivery: each call,
// and each disarm, as the Data of its events.Event. The type is defined
// in internal/control/events, which delivery imports instead of this
// package.
type Event = events.Scaling
