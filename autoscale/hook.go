package autoscale

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reason says why a call is made; it is the body's "reason".
type Reason string

// The reasons a call is made.
const (
	// ReasonColdStart asks for the first instance of an empty pool.
	ReasonColdStart Reason = "cold_start"
	// ReasonScaleOut asks for one instance more than the pool has.
	ReasonScaleOut Reason = "scale_out"
	// ReasonScaleIn asks for one instance fewer than the pool has.
	ReasonScaleIn Reason = "scale_in"
)

// HookBody is the JSON body of a hook call. It encodes to exactly the keys
// reason, hostname, path, org_id, current, desired, min, max and
// lease_generation, in that order; an empty Path or OrgID, and a zero
// LeaseGeneration, encode as null.
type HookBody struct {
	Reason   Reason
	Hostname string
	Path     string
	OrgID    string
	Current  int
	Desired  int
	Min      int
	Max      int
	// LeaseGeneration is the generation of the store lease the call is
	// made under (store.ScalingLease.Generation), also sent as the
	// Aperio-Lease-Generation header: a provider that has seen a higher
	// one for the same hostname and path refuses the call (fencing; see
	// docs/autoscaling.md). 0 (null, and no header) when the call is made
	// without a lease, the store being unreachable.
	LeaseGeneration int64
}

// LeaseGenerationHeader carries HookBody.LeaseGeneration.
const LeaseGenerationHeader = "Aperio-Lease-Generation"

// MarshalJSON encodes b as the hook's wire body.
func (b HookBody) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Reason   Reason  `json:"reason"`
		Hostname string  `json:"hostname"`
		Path     *string `json:"path"`
		OrgID    *string `json:"org_id"`
		Current  int     `json:"current"`
		Desired  int     `json:"desired"`
		Min      int     `json:"min"`
		Max      int     `json:"max"`
		Gen      *int64  `json:"lease_generation"`
	}{b.Reason, b.Hostname, nullable(b.Path), nullable(b.OrgID), b.Current, b.Desired, b.Min, b.Max, generation(b.LeaseGeneration)})
}

// hookOrg is the org_id a hook call for a record of org sends: "" (null)
// for the default organization, see Config.DefaultOrgID.
func (c *Controller) hookOrg(org string) string {
	if org == c.cfg.DefaultOrgID {
		return ""
	}
	return org
}

// generation maps 0 to nil, so that it encodes as JSON null.
func generation(g int64) *int64 {
	if g == 0 {
		return nil
	}
	return &g
}

// nullable maps "" to nil, so that it encodes as JSON null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalBody returns the exact bytes a Caller sends as the request body:
// compact JSON, no trailing newline.
func MarshalBody(b HookBody) ([]byte, error) {
	return json.Marshal(b)
}

// MaxRetryAfter caps how long a provider's Retry-After is trusted.
const MaxRetryAfter = 10 * time.Minute

// ParseRetryAfter parses a Retry-After header value, either delta-seconds
// ("120") or an HTTP-date, relative to now. It reports false for an empty
// or malformed value. The result is never negative (a date in the past
// means 0) and never above MaxRetryAfter, whatever the header says.
func ParseRetryAfter(header string, now time.Time) (time.Duration, bool) {
	h := strings.TrimSpace(header)
	if h == "" {
		return 0, false
	}
	if allDigits(h) {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n > int64(MaxRetryAfter/time.Second) {
			// Only overflow fails here: a number too large to parse is a
			// long wait, which the cap bounds.
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// CallError is why a hook call failed: a non-2xx Status, or Err when there
// was no response (a timeout, a fence refusal, a transport error). Start.Err
// returns one for a failed cold start.
type CallError struct {
	// Status is the HTTP status; 0 when there was no response.
	Status int
	// Err is the Caller's error, nil when the provider answered.
	Err error
}

func (e *CallError) Error() string {
	if e.Err != nil {
		return "autoscale: scaling hook: " + e.Err.Error()
	}
	return fmt.Sprintf("autoscale: scaling hook answered %d", e.Status)
}

// Unwrap returns the Caller's error.
func (e *CallError) Unwrap() error { return e.Err }
