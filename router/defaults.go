package router

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// Strategies are the values of Config.Strategy (lb_strategy), the default
// first.
var Strategies = []string{"round-robin", "least-inflight", "primary-standby", "sticky"}

// UnderscoreHeaderActions are the values of Config.UnderscoreHeaders
// (underscore_headers), the default first.
var UnderscoreHeaderActions = []string{"allow", "drop", "refuse"}

// MaxRetryOn5xx bounds the statuses of Config.RetryOn5xx (retry_on_5xx).
const MaxRetryOn5xx = 16

// Failovers are the values of Config.Failover (failover), the default
// first.
var Failovers = []string{"fail", "retry", "wait", "retry-wait"}

// DefaultConfig returns aperio-server's default routing settings, the one
// place they are written: 10 MiB bodies, a 10s gateway_timeout, 100
// requests in flight (256 per visitor address, 10000 WebSocket relays),
// a visitor bucket of 100 refilled at 5 a second,
// round-robin, no failover (at most 2 jumps in 15s once one is chosen),
// header names with underscores allowed,
// 1000 held requests, visitor pacing of 1m idle and 512 bytes a second,
// outlier ejection after 5 5xx answers in a row for 30s (at most half a
// pool ejected), and request bodies up to 256 KiB kept for failover.
// DownThreshold is the tunnel's (tunnel.DefaultServerConfig), since one
// threshold both drops a silent client and ends the wait for it to return.
// Scaler, Cache, Logger and Tracer are nil.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:          10 << 20,
		GatewayTimeout:        10 * time.Second,
		DownThreshold:         tunnel.DefaultServerConfig().DownThreshold,
		Strategy:              Strategies[0],
		MaxConcurrentRequests: 100,
		MaxStreamsPerIP:       256,
		MaxWSConnections:      10000,
		IPLimitMax:            100,
		IPLimitRefill:         5,
		Failover:              Failovers[0],
		UnderscoreHeaders:     UnderscoreHeaderActions[0],
		FailoverMaxJumps:      2,
		FailoverWindow:        15 * time.Second,
		MaxHeld:               1000,
		VisitorIdleTimeout:    time.Minute,
		VisitorMinRate:        512,

		OutlierConsecutive5xx:    5,
		OutlierEjectionTime:      30 * time.Second,
		OutlierMaxEjectedPercent: 50,
		FailoverReplayMaxBody:    256 << 10,
	}
}

// Validate reports every problem of cfg's settings, joined; nil when there
// is none. The zero value is valid. New calls it.
func (cfg Config) Validate() error {
	var errs []error
	negative := func(name string, bad bool, v any) {
		if bad {
			errs = append(errs, fmt.Errorf("router: %s must not be negative, got %v", name, v))
		}
	}
	negative("MaxBodyBytes", cfg.MaxBodyBytes < 0, cfg.MaxBodyBytes)
	negative("GatewayTimeout", cfg.GatewayTimeout < 0, cfg.GatewayTimeout)
	negative("DownThreshold", cfg.DownThreshold < 0, cfg.DownThreshold)
	negative("MaxConcurrentRequests", cfg.MaxConcurrentRequests < 0, cfg.MaxConcurrentRequests)
	negative("MaxStreamsPerIP", cfg.MaxStreamsPerIP < 0, cfg.MaxStreamsPerIP)
	negative("MaxWSConnections", cfg.MaxWSConnections < 0, cfg.MaxWSConnections)
	negative("IPLimitMax", cfg.IPLimitMax < 0, cfg.IPLimitMax)
	negative("IPLimitRefill", !(cfg.IPLimitRefill >= 0), cfg.IPLimitRefill)
	negative("FailoverMaxJumps", cfg.FailoverMaxJumps < 0, cfg.FailoverMaxJumps)
	negative("FailoverWindow", cfg.FailoverWindow < 0, cfg.FailoverWindow)
	negative("MaxHeld", cfg.MaxHeld < 0, cfg.MaxHeld)
	negative("VisitorIdleTimeout", cfg.VisitorIdleTimeout < 0, cfg.VisitorIdleTimeout)
	negative("VisitorMinRate", cfg.VisitorMinRate < 0, cfg.VisitorMinRate)
	negative("OutlierConsecutive5xx", cfg.OutlierConsecutive5xx < 0, cfg.OutlierConsecutive5xx)
	negative("OutlierEjectionTime", cfg.OutlierEjectionTime < 0, cfg.OutlierEjectionTime)
	negative("FailoverReplayMaxBody", cfg.FailoverReplayMaxBody < 0, cfg.FailoverReplayMaxBody)
	if cfg.OutlierMaxEjectedPercent < 0 || cfg.OutlierMaxEjectedPercent > 100 {
		errs = append(errs, fmt.Errorf("router: OutlierMaxEjectedPercent must be within 0..100, got %d", cfg.OutlierMaxEjectedPercent))
	}
	if len(cfg.RetryOn5xx) > MaxRetryOn5xx {
		errs = append(errs, fmt.Errorf("router: RetryOn5xx lists %d statuses, at most %d", len(cfg.RetryOn5xx), MaxRetryOn5xx))
	}
	for _, st := range cfg.RetryOn5xx {
		if st < 500 || st > 599 {
			errs = append(errs, fmt.Errorf("router: RetryOn5xx status %d is not a 5xx", st))
		}
	}
	if cfg.Strategy != "" && !slices.Contains(Strategies, cfg.Strategy) {
		errs = append(errs, fmt.Errorf("router: unknown lb_strategy %q", cfg.Strategy))
	}
	if _, err := parseFailover(cfg.Failover); err != nil {
		errs = append(errs, err)
	}
	if _, err := parseUnderscoreAction(cfg.UnderscoreHeaders); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkErrorPages(cfg.ErrorPages), checkWindows(cfg.MaintenanceWindows), checkFallbacks(cfg.Fallbacks))
	return errors.Join(errs...)
}
