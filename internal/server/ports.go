package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/store"

	"github.com/aperio-dev/aperio/internal/ports"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/tunnel"
)

// portsHook is the "ports" session hook: it admits each session's expose
// entries (ports.Manager) after the router applied its announcement, and
// answers them with Session.SetExposed before the welcome or the ack is
// written. A refused entry never refuses the session. It admits nothing
// at attach: the tunnel server calls Update right after Attach, before
// the welcome, so the notice of an entry refused at connect reaches the
// client with the welcome (the manager sends each refusal's notice once,
// to the first caller). A session's ports are released before the router
// forgets it.
func portsHook(m *ports.Manager) sessionHook {
	return sessionHook{
		name: "ports",
		updated: func(ctx context.Context, s *tunnel.Session) []string {
			st, notices := m.Apply(ctx, s.ID(), rawSession{s})
			s.SetExposed(st)
			return notices
		},
		leaving: func(ctx context.Context, s *tunnel.Session) { m.Release(ctx, s.ID(), s.Identity()) },
	}
}

// rawSession adapts a tunnel session to ports.Session.
type rawSession struct{ *tunnel.Session }

func (s rawSession) OpenRaw(ctx context.Context, h tunnel.RawHeader) (net.Conn, error) {
	c, err := s.Session.OpenRaw(ctx, h)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// portCounter adapts a usage counter to ports.Counter, so that a port's
// bytes count into the token's and organization's quotas.
type portCounter struct{ c *usage.Counter }

func (p portCounter) Allow() bool               { return p.c.Check() == usage.Allowed }
func (p portCounter) Charge(in, out int64) bool { return p.c.TryCharge(in, out) }
func (p portCounter) Cut()                      { p.c.Cut(p.c.Check()) }
func (p portCounter) Record(in, out int64)      { p.c.Record(in, out) }

// portUsage returns the ports.Config.Usage of meter m.
func portUsage(m *usage.Meter) func(tokenID, orgID, name string) ports.Counter {
	return func(tokenID, orgID, name string) ports.Counter {
		return portCounter{m.Counter(tokenID, orgID, name)}
	}
}

// newPorts builds the Manager of cfg's tcp_port_range: its audit entries
// go to the events queue (the manager reports them from Apply, which runs
// before the heartbeat's ack, so it must not wait for the store), its bytes into usage and quotas, its TCP connections
// end after visitor_idle_timeout without a byte (10 minutes when unset),
// or port_first_byte_timeout when the visitor has sent nothing yet.
func newPorts(cfg Config, meter *usage.Meter, emitter *events.Emitter, log *slog.Logger) (*ports.Manager, error) {
	rs, err := portspec.ParseList(cfg.TCPPortRange)
	if err != nil {
		return nil, fmt.Errorf("gateway: tcp_port_range: %w", err)
	}
	pc := ports.Config{Range: rs, MaxTCPConnections: cfg.MaxTCPConnections, TCPIdle: cfg.Router.VisitorIdleTimeout,
		MaxTCPConnectionsPerIP: cfg.PortMaxConnectionsPerIP, TCPFirstByte: cfg.PortFirstByteTimeout,
		UDPIdle:    cfg.UDPIdleTimeout,
		ListenHost: cfg.Host, Logger: log}
	if meter != nil {
		pc.Usage = portUsage(meter)
	}
	pc.Audit = func(_ context.Context, e ports.AuditEntry) {
		emitter.Offer(events.Event{Kind: e.Action, OrgID: e.OrgID, Actor: store.ClientActor(e.TokenID), Detail: e.Detail})
	}
	return ports.New(pc)
}

// metricTCPConnections is the gauge of open visitor connections (TCP) or
// flows (UDP) per public port.
const metricTCPConnections = "aperio.tcp_connections"

// registerPortMetrics observes aperio_tcp_connections{port, protocol}.
func registerPortMetrics(m metric.Meter, pm *ports.Manager) error {
	conns, err := m.Int64ObservableGauge(metricTCPConnections,
		metric.WithDescription("Visitor connections (tcp) or flows (udp) open on a public port."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, p := range pm.Snapshot() {
			o.ObserveInt64(conns, p.Open, metric.WithAttributes(attribute.Int("port", p.Port), attribute.String("protocol", p.Protocol)))
		}
		return nil
	}, conns)
	return err
}

// gatewayPorts is the admin API's view of the public ports.
type gatewayPorts struct{ g *Gateway }

func (p gatewayPorts) Explain(num int, proto string, ip netip.Addr) (admin.PortInfo, []string, bool, bool) {
	if p.g.ports == nil || !p.g.ports.Enabled() {
		return admin.PortInfo{}, nil, false, false
	}
	s, names, ok := p.g.ports.Admitting(num, proto, ip)
	return portInfo(s), names, ok, true
}

func (p gatewayPorts) Ports() []admin.PortInfo {
	if p.g.ports == nil {
		return nil
	}
	snap := p.g.ports.Snapshot()
	out := make([]admin.PortInfo, len(snap))
	for i, s := range snap {
		out[i] = portInfo(s)
	}
	return out
}

func portInfo(s ports.PortInfo) admin.PortInfo {
	return admin.PortInfo{Port: s.Port, Protocol: s.Protocol, OrgID: s.OrgID, OwnerOrgID: s.OwnerOrgID, Names: s.Names, Sessions: s.Sessions,
		Open: s.Open, BytesIn: s.BytesIn, BytesOut: s.BytesOut, Refused: s.Refused, Dropped: s.Dropped}
}
