package tunnel

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"
)

// Defaults and bounds of a scaling block (docs/autoscaling.md), which both
// binaries apply: aperio-client to the fields its config leaves unset, the
// server to the zero fields of a block announced without them.
const (
	// DefaultColdStart is how long a visitor may be held while a cold
	// start runs.
	DefaultColdStart = 45 * time.Second
	// MaxColdStart bounds ColdStart.
	MaxColdStart = 5 * time.Minute
	// DefaultTargetUtilization is the utilization at or above which the
	// server scales out.
	DefaultTargetUtilization = 0.8
	// DefaultScalingWindow is how long utilization must stay at or above
	// target before a scale-out.
	DefaultScalingWindow = 15 * time.Second
	// DefaultScalingCooldown is the minimum gap between two calls for one
	// bind.
	DefaultScalingCooldown = 60 * time.Second
	// MinScalingWindow is the smallest Window and Cooldown accepted.
	MinScalingWindow = time.Second
	// MaxScalingURLBytes bounds URL.
	MaxScalingURLBytes = 2048
	// MaxScalingSecretBytes bounds Secret.
	MaxScalingSecretBytes = 4096
)

// Scaling is a client's scaling declaration (docs/autoscaling.md): the
// block a client announces, the server declares to its autoscaler and the
// client's config loader builds from its scaling: keys. It is a plain
// value, safe to copy. Validate holds the rules of a complete block;
// DefaultScaling and WithDefaults the defaults of the fields left unset.
//
// On the wire the durations travel as whole milliseconds (cold_start_ms,
// window_ms, cooldown_ms), as they always have: MarshalJSON drops any
// sub-millisecond part, and UnmarshalJSON refuses a count of milliseconds
// that does not fit a time.Duration.
type Scaling struct {
	// URL is the provider's hook the server calls (scaling.url): absolute,
	// http or https (the server's fence decides at call time whether plain
	// http is allowed), without user info, at most MaxScalingURLBytes.
	// Required.
	URL string
	// Secret is sent as "Authorization: Bearer" (scaling.secret); "" sends
	// none. At most MaxScalingSecretBytes.
	Secret string
	// Min is the lowest capacity asked for, the floor of a scale-in
	// (scaling.min). 0 scales to zero, so a request can cold start the
	// service.
	Min int
	// Max is the ceiling the server never asks above, cold starts
	// included (scaling.max); at least Min. 0 means DefaultScalingMax(Min)
	// to WithDefaults.
	Max int
	// ColdStart is how long a visitor may be held while the service
	// starts (scaling.cold_start); at most MaxColdStart. 0 means
	// DefaultColdStart to WithDefaults.
	ColdStart time.Duration
	// TargetUtilization is the fraction of capacity in use at or above
	// which the server scales out, and below half of which it scales in
	// (scaling.target_utilization); in (0,1]. 0 means
	// DefaultTargetUtilization to WithDefaults.
	TargetUtilization float64
	// Window is how long utilization must stay at or above target before
	// a scale-out, four of them below half the target before a scale-in
	// (scaling.window); at least MinScalingWindow. 0 means
	// DefaultScalingWindow to WithDefaults.
	Window time.Duration
	// Cooldown is the minimum gap between two calls for one bind
	// (scaling.cooldown); at least MinScalingWindow. 0 means
	// DefaultScalingCooldown to WithDefaults.
	Cooldown time.Duration
}

// DefaultScaling returns the defaults of a scaling block: what a client's
// config starts from before its scaling: keys apply. URL is empty and Max
// is 0, whose default depends on Min (DefaultScalingMax).
func DefaultScaling() Scaling {
	return Scaling{
		ColdStart:         DefaultColdStart,
		TargetUtilization: DefaultTargetUtilization,
		Window:            DefaultScalingWindow,
		Cooldown:          DefaultScalingCooldown,
	}
}

// DefaultScalingMax is the ceiling of a block that declares no max: min,
// and at least one. A cold start asks for max(1, min) instances, so no
// smaller default could hold the rule that no call asks above max; and no
// larger one is safe to assume, since the provider pays for every
// instance. With it the server cold starts the service to that size and
// never scales it out.
func DefaultScalingMax(min int) int { return max(1, min) }

// WithDefaults returns s with each zero field that has a default set to
// it (DefaultScaling's; Max to DefaultScalingMax(Min) when Min is not
// negative): how the server reads a block announced without them.
func (s Scaling) WithDefaults() Scaling {
	def := DefaultScaling()
	if s.ColdStart == 0 {
		s.ColdStart = def.ColdStart
	}
	if s.TargetUtilization == 0 {
		s.TargetUtilization = def.TargetUtilization
	}
	if s.Window == 0 {
		s.Window = def.Window
	}
	if s.Cooldown == 0 {
		s.Cooldown = def.Cooldown
	}
	if s.Max == 0 && s.Min >= 0 {
		s.Max = DefaultScalingMax(s.Min)
	}
	return s
}

// ScalingRule names a rule of a scaling block, so that a caller can say a
// broken one in its own words (the client's config names its keys and
// shows the URL; the server's notice never does).
type ScalingRule string

// The rules Validate checks.
const (
	ScalingRequired    ScalingRule = "required"     // URL is empty
	ScalingTooLong     ScalingRule = "too_long"     // URL or Secret above its bound
	ScalingUnparsable  ScalingRule = "unparsable"   // URL does not parse
	ScalingScheme      ScalingRule = "scheme"       // URL is neither http nor https
	ScalingNoHost      ScalingRule = "no_host"      // URL has no host
	ScalingCredentials ScalingRule = "credentials"  // URL carries user info
	ScalingNegative    ScalingRule = "negative"     // Min, Max or ColdStart below 0
	ScalingBelowMin    ScalingRule = "below_min"    // Max below Min
	ScalingAboveMax    ScalingRule = "above_max"    // ColdStart above MaxColdStart
	ScalingOutOfRange  ScalingRule = "out_of_range" // TargetUtilization outside (0,1]
	ScalingTooShort    ScalingRule = "too_short"    // Window or Cooldown below MinScalingWindow
)

// ScalingError is one broken rule of a scaling block. Its text names the
// field by its wire key, never shows the URL or the secret, and is meant
// for the announcing client's log.
type ScalingError struct {
	// Field is the broken field's key: url, secret, min, max, cold_start,
	// target_utilization, window or cooldown.
	Field string
	// Rule is the rule it breaks.
	Rule ScalingRule
	msg  string
}

func (e *ScalingError) Error() string { return e.msg }

// Problems returns every rule s breaks, in field order, or nil when s is
// a valid complete block. It checks s as it is: a zero field that has a
// default is a problem unless WithDefaults filled it first.
func (s Scaling) Problems() []*ScalingError {
	var ps []*ScalingError
	add := func(field string, rule ScalingRule, format string, args ...any) {
		ps = append(ps, &ScalingError{Field: field, Rule: rule, msg: fmt.Sprintf(format, args...)})
	}
	switch u, err := url.Parse(s.URL); {
	case s.URL == "":
		add("url", ScalingRequired, "url is required")
	case len(s.URL) > MaxScalingURLBytes:
		add("url", ScalingTooLong, "url is longer than %d bytes", MaxScalingURLBytes)
	case err != nil:
		add("url", ScalingUnparsable, "url does not parse")
	case u.Scheme != "https" && u.Scheme != "http":
		add("url", ScalingScheme, "url must be https (or http where the server allows it)")
	case u.Host == "":
		add("url", ScalingNoHost, "url has no host")
	case u.User != nil:
		add("url", ScalingCredentials, "url must not carry credentials: set secret instead")
	}
	if len(s.Secret) > MaxScalingSecretBytes {
		add("secret", ScalingTooLong, "secret is longer than %d bytes", MaxScalingSecretBytes)
	}
	if s.Min < 0 {
		add("min", ScalingNegative, "min %d is negative", s.Min)
	}
	if s.Max < 0 {
		add("max", ScalingNegative, "max %d is negative", s.Max)
	}
	if s.Max < s.Min {
		add("max", ScalingBelowMin, "max %d is below min %d", s.Max, s.Min)
	}
	if s.ColdStart < 0 {
		add("cold_start", ScalingNegative, "cold_start %v is negative", s.ColdStart)
	}
	if s.ColdStart > MaxColdStart {
		add("cold_start", ScalingAboveMax, "cold_start %v is above the maximum of %v", s.ColdStart, MaxColdStart)
	}
	if t := s.TargetUtilization; !(t > 0 && t <= 1) {
		add("target_utilization", ScalingOutOfRange, "target_utilization %v is not in (0,1]", t)
	}
	if s.Window < MinScalingWindow {
		add("window", ScalingTooShort, "window %v is below %v", s.Window, MinScalingWindow)
	}
	if s.Cooldown < MinScalingWindow {
		add("cooldown", ScalingTooShort, "cooldown %v is below %v", s.Cooldown, MinScalingWindow)
	}
	return ps
}

// Validate reports every rule s breaks (Problems), joined, each a
// *ScalingError; nil when s is a valid complete block.
func (s Scaling) Validate() error {
	ps := s.Problems()
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
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
	coldStart, err := millis("scaling", "cold_start_ms", w.ColdStartMS)
	if err != nil {
		return err
	}
	window, err := millis("scaling", "window_ms", w.WindowMS)
	if err != nil {
		return err
	}
	cooldown, err := millis("scaling", "cooldown_ms", w.CooldownMS)
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

// millis is ms milliseconds as a Duration, or an error naming the block
// and key when ms*1e6 nanoseconds overflows int64.
func millis(block, key string, ms int64) (time.Duration, error) {
	const perMS = int64(time.Millisecond)
	if ms > math.MaxInt64/perMS || ms < math.MinInt64/perMS {
		return 0, fmt.Errorf("tunnel: %s: %s %d is out of range", block, key, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
