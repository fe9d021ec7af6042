package router

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
)

// settings is the part of a Router's configuration that Reconfigure
// replaces while the router runs: the limits, the traffic policy, the
// error pages, the maintenance windows, the fallbacks and default_access.
// It is immutable once published through Router.cur; a request reads it
// once, when its admission starts, so that every stage and its dispatch
// see all of one configuration or all of the other.
type settings struct {
	cfg         Config         // the fields below came from these
	ips         *ipLimiter     // nil without ip_limit_max
	policy      *policy.Policy // never nil
	defaultGate *gateEntry     // the gate of a service that announces no access block
	pages       errorPages
	windows     []MaintenanceWindow
	fallbacks   hostMap[*Fallback]
	underscore  underscoreAction // cfg.UnderscoreHeaders, parsed
}

// liveFields are the Config fields Reconfigure applies; every other field
// keeps the value New was given.
func liveFields(dst *Config, src Config) {
	dst.MaxBodyBytes = src.MaxBodyBytes
	dst.GatewayTimeout = src.GatewayTimeout
	dst.MaxConcurrentRequests = src.MaxConcurrentRequests
	dst.IPLimitMax, dst.IPLimitRefill = src.IPLimitMax, src.IPLimitRefill
	dst.MaxHeld = src.MaxHeld
	dst.VisitorIdleTimeout, dst.VisitorMinRate = src.VisitorIdleTimeout, src.VisitorMinRate
	dst.Policy = src.Policy
	dst.ErrorPages = src.ErrorPages
	dst.MaintenanceWindows = src.MaintenanceWindows
	dst.Fallbacks = src.Fallbacks
	dst.Access.Default = src.Access.Default
	dst.UnderscoreHeaders = src.UnderscoreHeaders
}

// buildSettings compiles cfg's live part. prev, when set, is the snapshot
// it replaces: what did not change is kept, so that a reload that leaves
// ip_limit_* or the policy as they were keeps their buckets.
func (rt *Router) buildSettings(cfg Config, prev *settings) (*settings, error) {
	s := &settings{cfg: cfg}
	var err error
	if s.underscore, err = parseUnderscoreAction(cfg.UnderscoreHeaders); err != nil {
		return nil, err
	}
	if prev != nil && prev.cfg.Access.Default == cfg.Access.Default {
		s.defaultGate = prev.defaultGate
	} else if s.defaultGate, err = cfg.Access.buildGate(nil); err != nil {
		return nil, err
	}
	if prev != nil && reflect.DeepEqual(prev.cfg.Policy, cfg.Policy) {
		s.policy = prev.policy
	} else if s.policy, err = policy.New(cfg.Policy); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	switch {
	case cfg.IPLimitMax <= 0:
	case prev != nil && prev.ips != nil && prev.cfg.IPLimitMax == cfg.IPLimitMax && prev.cfg.IPLimitRefill == cfg.IPLimitRefill:
		s.ips = prev.ips
	default:
		s.ips = newIPLimiter(cfg.IPLimitMax, cfg.IPLimitRefill)
	}
	s.pages = compileErrorPages(cfg.ErrorPages)
	s.windows = slices.Clone(cfg.MaintenanceWindows)
	for i := range cfg.Fallbacks {
		f := cfg.Fallbacks[i]
		s.fallbacks.set(hostname.Normalize(f.Hostname), &f)
	}
	return s, nil
}

// Reconfigure applies the live part of cfg (max_body_size, underscore_headers,
// gateway_timeout, max_concurrent_requests, ip_limit_*, scaling_max_held,
// the visitor pacing, the traffic policy, error_pages,
// maintenance_windows, fallbacks and default_access, for services that
// announce no access block and those whose block leaves their openness
// to it, see gateEntry.other) in one step: a request that started before
// it finishes on the old settings, the next one sees all of the new. The
// other fields of cfg are ignored; they need a new Router. On error
// (cfg does not validate or compile) nothing changes. Safe for concurrent
// use with requests; concurrent Reconfigure calls must be serialized by
// the caller.
func (rt *Router) Reconfigure(cfg Config) error {
	prev := rt.cur.Load()
	next := prev.cfg
	liveFields(&next, cfg)
	if err := next.Validate(); err != nil {
		return err
	}
	s, err := rt.buildSettings(next, prev)
	if err != nil {
		return err
	}
	rt.cur.Store(s)
	return nil
}
