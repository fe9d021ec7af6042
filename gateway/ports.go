package gateway

import (
	"context"
	"net"

	"github.com/aperio-dev/aperio/ports"
	"github.com/aperio-dev/aperio/tunnel"
	"github.com/aperio-dev/aperio/usage"
)

// portsRegistry admits each session's expose entries (ports.Manager) after
// the registry it wraps has taken the session, and answers them with
// Session.SetExposed before the welcome or the ack is written. A refused
// entry never refuses the session. Not yet in the chain of New: see
// docs/tcp-udp.md.
type portsRegistry struct {
	tunnel.Registry
	ports *ports.Manager
}

func (r portsRegistry) Attach(ctx context.Context, s *tunnel.Session) error {
	if err := r.Registry.Attach(ctx, s); err != nil {
		return err
	}
	st, _ := r.ports.Apply(ctx, s.ID(), rawSession{s})
	s.SetExposed(st)
	return nil
}

func (r portsRegistry) Update(ctx context.Context, s *tunnel.Session) []string {
	notices := r.Registry.Update(ctx, s)
	st, more := r.ports.Apply(ctx, s.ID(), rawSession{s})
	s.SetExposed(st)
	return append(notices, more...)
}

func (r portsRegistry) Detach(ctx context.Context, s *tunnel.Session) {
	r.ports.Release(ctx, s.ID(), s.Identity())
	r.Registry.Detach(ctx, s)
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

func (p portCounter) Allow() bool          { return p.c.Check() == usage.Allowed }
func (p portCounter) Record(in, out int64) { p.c.Record(in, out) }

// portUsage returns the ports.Config.Usage of meter m.
func portUsage(m *usage.Meter) func(tokenID, orgID, name string) ports.Counter {
	return func(tokenID, orgID, name string) ports.Counter {
		return portCounter{m.Counter(tokenID, orgID, name)}
	}
}
