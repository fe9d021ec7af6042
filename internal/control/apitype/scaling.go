package apitype

import "time"

// The defaults and bounds of a scaling block, which both binaries apply:
// aperio-client to the fields a declaration leaves unset, the server to a
// declaration that arrives without them (autoscaling.md).
const (
	// DefaultColdStart is how long a visitor may be held while a cold
	// start runs (scaling.cold_start).
	DefaultColdStart = 45 * time.Second
	// MaxColdStart caps scaling.cold_start.
	MaxColdStart = 5 * time.Minute
	// DefaultTargetUtilization is the utilization above which the server
	// scales out (scaling.target_utilization).
	DefaultTargetUtilization = 0.8
	// DefaultWindow is how long utilization must stay at or above target
	// before a scale-out (scaling.window).
	DefaultWindow = 15 * time.Second
	// DefaultCooldown is the minimum gap between two calls for one bind
	// (scaling.cooldown).
	DefaultCooldown = 60 * time.Second
	// MinWindow is the smallest window and cooldown accepted.
	MinWindow = time.Second
)
