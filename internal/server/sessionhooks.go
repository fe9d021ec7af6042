package server

import (
	"context"

	"github.com/aperio-dev/aperio/tunnel"
)

// sessionHook is one feature's part in the life of a tunnel session: what
// it does when a client attaches, announces (its hello, then every
// heartbeat) and leaves. Each function may be nil.
//
// The tunnel server's registry is a sessionChain: the router, then the
// hooks in a declared order (Gateway.sessionHooks). A hook sees the
// router's work done when it runs after the router and not yet done when
// it runs before, as a decorator wrapped around the hooks before it in the
// list would: the steps that come after the router run in list order, the
// steps that come before it in reverse list order.
type sessionHook struct {
	// name names the hook; TestSessionHookOrder pins the order by it.
	name string
	// admit runs before the router's Attach (in reverse list order); an
	// error refuses the session, and its text is sent to the client.
	admit func(ctx context.Context, s *tunnel.Session) error
	// unadmit undoes an admit that succeeded when a later step refused
	// the session.
	unadmit func(s *tunnel.Session)
	// refused runs after a refusal by any step (in list order).
	refused func(ctx context.Context, s *tunnel.Session, err error)
	// attached runs after the session attached (in list order).
	attached func(ctx context.Context, s *tunnel.Session)
	// updated runs after the router applied the session's announcement
	// (in list order); the notices it returns reach the client.
	updated func(ctx context.Context, s *tunnel.Session) []string
	// leaving runs before the router forgets the session (in reverse list
	// order).
	leaving func(ctx context.Context, s *tunnel.Session)
	// left runs after the router forgot the session (in list order).
	left func(ctx context.Context, s *tunnel.Session)
}

// sessionChain is the tunnel server's Registry: router, then hooks, as
// sessionHook says.
type sessionChain struct {
	router tunnel.Registry
	hooks  []sessionHook
}

var _ tunnel.Registry = sessionChain{}

// Attach admits s through each hook's admit, then the router; on a
// refusal it undoes the admits that succeeded and tells every hook.
func (c sessionChain) Attach(ctx context.Context, s *tunnel.Session) error {
	if err := c.attach(ctx, s); err != nil {
		for _, h := range c.hooks {
			if h.refused != nil {
				h.refused(ctx, s, err)
			}
		}
		return err
	}
	for _, h := range c.hooks {
		if h.attached != nil {
			h.attached(ctx, s)
		}
	}
	return nil
}

// attach runs the admits, in reverse list order, and the router's Attach.
func (c sessionChain) attach(ctx context.Context, s *tunnel.Session) error {
	for i := len(c.hooks) - 1; i >= 0; i-- {
		h := c.hooks[i]
		if h.admit == nil {
			continue
		}
		if err := h.admit(ctx, s); err != nil {
			c.unadmit(i+1, s)
			return err
		}
	}
	if err := c.router.Attach(ctx, s); err != nil {
		c.unadmit(0, s)
		return err
	}
	return nil
}

// unadmit undoes the admits of hooks[from:], which succeeded, the last
// admitted first.
func (c sessionChain) unadmit(from int, s *tunnel.Session) {
	for _, h := range c.hooks[from:] {
		if h.admit != nil && h.unadmit != nil {
			h.unadmit(s)
		}
	}
}

// Update applies s's announcement to the router, then to each hook, and
// returns every notice, the router's first.
func (c sessionChain) Update(ctx context.Context, s *tunnel.Session) []string {
	notices := c.router.Update(ctx, s)
	for _, h := range c.hooks {
		if h.updated != nil {
			notices = append(notices, h.updated(ctx, s)...)
		}
	}
	return notices
}

// Detach runs the hooks' leaving steps, the router's Detach, then the
// hooks' left steps.
func (c sessionChain) Detach(ctx context.Context, s *tunnel.Session) {
	for i := len(c.hooks) - 1; i >= 0; i-- {
		if h := c.hooks[i]; h.leaving != nil {
			h.leaving(ctx, s)
		}
	}
	c.router.Detach(ctx, s)
	for _, h := range c.hooks {
		if h.left != nil {
			h.left(ctx, s)
		}
	}
}
