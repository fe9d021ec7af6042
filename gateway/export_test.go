package gateway

import "context"

// ColdStartForTest asks the server's autoscaling controller for a cold
// start of the bind and returns its refusal, or nil when it starts (or
// joins) a flight: how a test sees which records the controller knows and
// which it holds disarmed.
func (g *Gateway) ColdStartForTest(ctx context.Context, orgID, hostname, path string) error {
	_, err := g.ctl.ColdStart(ctx, orgID, hostname, path)
	return err
}

// ArmedForTest reports whether the router holds the bind armed, that is
// whether the gateway's last reload of the scaling records found it armed.
func (g *Gateway) ArmedForTest(hostname, path string) bool {
	return g.router.Armed(hostname, path)
}

// MetricsAddrForTest returns the metrics listener's address, or "" when
// metrics_listen is unset or not listening yet.
func (g *Gateway) MetricsAddrForTest() string {
	s, _ := g.metricsAddr.Load().(string)
	return s
}
