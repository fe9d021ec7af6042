package tunnel

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Scaling is a client's scaling declaration (docs/autoscaling.md): the
// block a client announces, the server declares to its autoscaler and the
// client's config loader builds. It is a plain value, safe to copy.
//
// On the wire the durations travel as whole milliseconds (cold_start_ms,
// window_ms, cooldown_ms), as they always have: MarshalJSON drops any
// sub-millisecond part, and UnmarshalJSON refuses a count of milliseconds
// that does not fit a time.Duration.
type Scaling struct {
	// URL is the provider's hook the server calls, http or https.
	URL string
	// Secret is sent as "Authorization: Bearer"; "" sends none.
	Secret string
	// Min is the lowest capacity asked for; 0 scales to zero.
	Min int
	// Max is the ceiling the server never asks above, cold starts
	// included.
	Max int
	// ColdStart is how long a visitor may be held while the service
	// starts.
	ColdStart time.Duration
	// TargetUtilization is the fraction of capacity in use at or above
	// which the server scales out, in (0,1].
	TargetUtilization float64
	// Window is how long utilization must stay at or above target before
	// a scale-out.
	Window time.Duration
	// Cooldown is the minimum gap between two calls for one bind.
	Cooldown time.Duration
}

// scalingWire is Scaling as the control stream carries it. Its fields,
// their order and their tags are the wire format: servers and clients of
// every release read and write exactly these.
type scalingWire struct {
	URL               string  `json:"url"`
	Secret            string  `json:"secret,omitempty"`
	Min               int     `json:"min"`
	Max               int     `json:"max"`
	ColdStartMS       int64   `json:"cold_start_ms"`
	TargetUtilization float64 `json:"target_utilization"`
	WindowMS          int64   `json:"window_ms"`
	CooldownMS        int64   `json:"cooldown_ms"`
}

// MarshalJSON writes s in the wire format, durations as whole
// milliseconds.
func (s Scaling) MarshalJSON() ([]byte, error) {
	return json.Marshal(scalingWire{
		URL: s.URL, Secret: s.Secret, Min: s.Min, Max: s.Max,
		ColdStartMS:       s.ColdStart.Milliseconds(),
		TargetUtilization: s.TargetUtilization,
		WindowMS:          s.Window.Milliseconds(),
		CooldownMS:        s.Cooldown.Milliseconds(),
	})
}

// UnmarshalJSON reads s from the wire format. A duration whose count of
// milliseconds does not fit a time.Duration (about ±292 years) is an
// error rather than a value wrapped around: no client can send one, so
// the frame is refused as malformed. Negative durations decode as they
// are; Validate reports them.
func (s *Scaling) UnmarshalJSON(b []byte) error {
	var w scalingWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	coldStart, err := millis("cold_start_ms", w.ColdStartMS)
	if err != nil {
		return err
	}
	window, err := millis("window_ms", w.WindowMS)
	if err != nil {
		return err
	}
	cooldown, err := millis("cooldown_ms", w.CooldownMS)
	if err != nil {
		return err
	}
	*s = Scaling{
		URL: w.URL, Secret: w.Secret, Min: w.Min, Max: w.Max,
		ColdStart: coldStart, TargetUtilization: w.TargetUtilization,
		Window: window, Cooldown: cooldown,
	}
	return nil
}

// millis is ms milliseconds as a Duration, or an error naming key when
// ms*1e6 nanoseconds overflows int64.
func millis(key string, ms int64) (time.Duration, error) {
	const perMS = int64(time.Millisecond)
	if ms > math.MaxInt64/perMS || ms < math.MinInt64/perMS {
		return 0, fmt.Errorf("tunnel: scaling: %s %d is out of range", key, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
