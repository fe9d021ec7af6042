package apitype

import "time"

// The actions of a ScalingDecision.
const (
	// ScalingActionColdStart asks for the first instance of an empty pool.
	ScalingActionColdStart = "cold_start"
	// ScalingActionScaleOut asks for one instance more.
	ScalingActionScaleOut = "scale_out"
	// ScalingActionScaleIn asks for one instance fewer.
	ScalingActionScaleIn = "scale_in"
	// ScalingActionNone is a decision to make no call although the
	// samples asked for one: held by the cooldown, or the pool is at max.
	ScalingActionNone = "none"
)

// The outcomes of a ScalingDecision.
const (
	// ScalingOutcomePending is a call queued for a slot or in flight.
	ScalingOutcomePending = "pending"
	// ScalingOutcomeAccepted is a call the provider accepted (2xx).
	ScalingOutcomeAccepted = "accepted"
	// ScalingOutcomeFailed is a call that failed: Status and Error say how.
	ScalingOutcomeFailed = "failed"
	// ScalingOutcomeDropped is a decision given up before its call: the
	// pool or the record changed while it waited, another server called,
	// or the server stopped. Error says why.
	ScalingOutcomeDropped = "dropped"
	// ScalingOutcomeRefused is a decision the full call queue refused.
	ScalingOutcomeRefused = "refused"
	// ScalingOutcomeHeld is a ScalingActionNone decision: no call was
	// wanted or allowed. Reason says why.
	ScalingOutcomeHeld = "held"
)

// ScalingDecision is one decision the answering server's autoscaler made
// about a scaling record, as GET /scaling/{id} lists it and as the
// autoscaler reports it to the event stream (autoscale.Config.OnDecision).
// It lives in that server's memory only: another server, or a restart,
// has its own.
type ScalingDecision struct {
	// Seq orders the decisions of the answering server, from 1: a later
	// decision has a higher Seq. An update of a decision (its outcome, a
	// repeat) keeps its Seq.
	Seq uint64 `json:"seq"`
	// RecordID, OrgID, Hostname and Path name the record and its bind.
	RecordID string `json:"record_id"`
	OrgID    string `json:"org_id"`
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
	// At is when the decision was made; UpdatedAt when it last changed
	// (its outcome, or its latest repeat).
	At        time.Time `json:"at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Action is one of the ScalingAction constants.
	Action string `json:"action"`
	// Reason says, in words, why the decision was made.
	Reason string `json:"reason"`
	// Samples are the latest utilization samples of the stretch behind the
	// decision, oldest first, rounded to 3 decimals: at most 30 of them
	// (SampleCount counts them all). Empty for a cold start.
	Samples     []float64 `json:"samples"`
	SampleCount int       `json:"sample_count"`
	// Current is the instances the pool had; Desired those the call asks
	// for (Current for a held decision).
	Current int `json:"current"`
	Desired int `json:"desired"`
	// Outcome is one of the ScalingOutcome constants.
	Outcome string `json:"outcome"`
	// Status is the call's HTTP status; 0 when it got no response or was
	// not made.
	Status int `json:"status"`
	// Error says why a call failed, or why a decision was dropped or
	// refused; "" otherwise.
	Error string `json:"error,omitempty"`
	// Disarmed says this decision's failed call tripped the breaker.
	Disarmed bool `json:"disarmed,omitempty"`
	// Repeats counts the samples, after the first, that made the same
	// held decision in a row: they update this one rather than add more.
	Repeats int `json:"repeats"`
}

// ScalingPoint is one sample of a record's pool, as the answering server
// took it (once a second while the record is armed).
type ScalingPoint struct {
	At        time.Time `json:"at"`
	Instances int       `json:"instances"`
	Capacity  int       `json:"capacity"`
	Inflight  int       `json:"inflight"`
	// Utilization is Inflight/Capacity; nil when Capacity is 0.
	Utilization *float64 `json:"utilization"`
}

// ScalingRecordDetail is GET /scaling/{id}'s answer: the record as GET
// /scaling lists it, with what the answering server remembers of it.
type ScalingRecordDetail struct {
	ScalingRecord
	// Decisions are the record's latest decisions, newest first: at most
	// 20.
	Decisions []ScalingDecision `json:"decisions"`
	// Series is the pool's latest samples, oldest first: at most 120, one
	// a second, so two minutes.
	Series []ScalingPoint `json:"series"`
}
