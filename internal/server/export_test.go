package server

import (
	"context"
	"net/netip"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
)

// ColdStartForTest asks the server's autoscaling controller for a cold
// start of the bind and returns its refusal, or nil when it starts (or
// joins) a flight: how a test sees which records the controller knows and
// which it holds disarmed.
func (g *Gateway) ColdStartForTest(ctx context.Context, orgID, hostname, path string) error {
	_, err := g.scaler.ctl.ColdStart(ctx, orgID, hostname, path)
	return err
}

// ArmedForTest reports whether the router holds the bind armed, that is
// whether the gateway's last reload of the scaling records found it armed.
func (g *Gateway) ArmedForTest(hostname, path string) bool {
	return g.registry.Armed(hostname, path)
}

// ArmedLoadsForTest returns how many times the server has loaded the
// router's armed binds from the store (each load reads every scaling
// record and its armers' tokens).
func (g *Gateway) ArmedLoadsForTest() int64 {
	return g.scaler.armed.loads.Load()
}

// DrivesForTest reports whether orgID's record would drive a cold start of
// the bind now.
func (g *Gateway) DrivesForTest(orgID, hostname, path string) bool {
	return g.registry.Drives(orgID, hostname, path)
}

// MetricsAddrForTest returns the metrics listener's address, or "" when
// metrics_listen is unset or not listening yet.
func (g *Gateway) MetricsAddrForTest() string {
	s, _ := g.metricsAddr.Load().(string)
	return s
}

// DebugAddrForTest returns the debug listener's address, or "" when
// debug_listen is unset or not listening yet.
func (g *Gateway) DebugAddrForTest() string {
	s, _ := g.debugAddr.Load().(string)
	return s
}

// DeclarationsLateForTest returns how many heartbeat acks went before
// their announcement's scaling declarations were done.
func (g *Gateway) DeclarationsLateForTest() int64 {
	return g.scaler.hook.decl.Stats().Late
}

// RecheckTokensForTest re-reads the token of every session and disconnects
// the sessions of revoked ones, as the server does after a resync.
func (g *Gateway) RecheckTokensForTest(ctx context.Context) {
	g.tokens.recheck(ctx)
}

// ColdStartDoneForTest asks the server's controller for a cold start of
// the bind, as ColdStartForTest does, and returns the flight's Done
// channel with a function returning the flight's error once it is done.
func (g *Gateway) ColdStartDoneForTest(ctx context.Context, orgID, hostname, path string) (<-chan struct{}, func() error, error) {
	s, err := g.scaler.ctl.ColdStart(ctx, orgID, hostname, path)
	if err != nil {
		return nil, nil, err
	}
	return s.Done(), s.Err, nil
}

// SharesForTest returns the server's share keyring, so that a test can
// ask whether this server verifies a token.
func (g *Gateway) SharesForTest() interface {
	Verify(string) (access.ShareLink, error)
} {
	return g.access.shares
}

// StreamDroppedForTest returns the live stream's events dropped so far,
// over every subscriber.
func (g *Gateway) StreamDroppedForTest() int64 { return g.hub.Dropped() }

// StreamSubscribersForTest returns the live stream's subscribers now.
func (g *Gateway) StreamSubscribersForTest() int { return g.hub.Subscribers() }

// StallForTest subscribes to every event of the live stream and never
// reads: a follower whose writer is stuck. It is removed at the test's end
// by the caller's Close.
func (g *Gateway) StallForTest() (*telemetry.Subscription, error) {
	return g.hub.Subscribe(telemetry.StreamFilter{Types: []string{apitype.StreamAccess}})
}

// WarnExpiringForTest runs one check of expiring tokens now, as the
// minute's tick does.
func (g *Gateway) WarnExpiringForTest(ctx context.Context) { g.tokens.warnExpiring(ctx, time.Now()) }

// FlushUsageForTest writes the usage meter's counts to the store now and
// refreshes its quotas, as its loop does every usage_flush_interval.
func (g *Gateway) FlushUsageForTest(ctx context.Context) error {
	return g.usage.meter.Flush(ctx)
}

// RoutedForTest reports whether a request for host passes the route step
// in the table requests are matched against (explain's view), or stops
// before it (a maintenance window, say): a client counts as connected a
// moment before its routes are published.
func (g *Gateway) RoutedForTest(host string) bool {
	ex := g.router.Explain(context.Background(), host, "/", netip.Addr{})
	for _, s := range ex.Steps {
		if s.Name == apitype.StepRoute {
			return s.Outcome != apitype.OutcomeStop
		}
	}
	return true
}

// JoinsColdStartForTest reports whether a cold start of the bind would now
// join one under way (or in its cooldown) rather than call.
func (g *Gateway) JoinsColdStartForTest(ctx context.Context, orgID, hostname, path string) bool {
	return g.scaler.ctl.PlanColdStart(ctx, orgID, hostname, path).Join
}
