package events

import "time"

// Scaling is the payload of the autoscaler's events, one of the kinds
// apitype.EventScalingRequested, EventScalingFailed and
// EventScalingDisarmed: a provider hook call, or the breaker disarming a
// record. The autoscaler builds it as an Event's Data; webhook delivery
// and the admin API's stream read it. It lives here, on the emit path,
// so that delivery does not import the autoscaler.
type Scaling struct {
	// Type is the event's kind (apitype.EventScalingRequested, …).
	Type string
	// At is when the call ended.
	At time.Time
	// RecordID, OrgID, Hostname and Path name the record and its bind.
	RecordID, OrgID, Hostname, Path string
	// Reason is the call's reason as the hook's body spells it
	// ("scale_out", "scale_in", "cold_start").
	Reason string
	// Current, Desired, Min and Max are the call's body.
	Current, Desired int
	Min, Max         int
	// Status is the HTTP status; 0 when there was no response.
	Status int
	// ConsecutiveFailures is the breaker count after the call.
	ConsecutiveFailures int
	// Utilization holds the samples that caused the decision, oldest
	// first: at most the autoscaler's MaxRecordedSamples, the latest
	// ones. Empty for a cold start.
	Utilization []float64
	// IdempotencyKey is the decision's key.
	IdempotencyKey string
	// Err says why a call failed; "" on success.
	Err string
}
