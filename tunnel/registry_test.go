package tunnel

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// ctxRegistry is a fakeRegistry that keeps the context of each call and
// whether it was live when Detach was called.
type ctxRegistry struct {
	*fakeRegistry

	mu                              sync.Mutex // guards the following fields
	attachCtx, updateCtx, detachCtx context.Context
	errAtDetach                     error
}

func (r *ctxRegistry) Attach(ctx context.Context, s *Session) error {
	r.mu.Lock()
	r.attachCtx = ctx
	r.mu.Unlock()
	return r.fakeRegistry.Attach(ctx, s)
}

func (r *ctxRegistry) Update(ctx context.Context, s *Session) []string {
	r.mu.Lock()
	r.updateCtx = ctx
	r.mu.Unlock()
	return r.fakeRegistry.Update(ctx, s)
}

func (r *ctxRegistry) Detach(ctx context.Context, s *Session) {
	r.mu.Lock()
	r.detachCtx, r.errAtDetach = ctx, ctx.Err()
	r.mu.Unlock()
	r.fakeRegistry.Detach(ctx, s)
}

// TestRegistryGetsSessionContext: every registry call of a session gets
// the session's context, live through Detach and cancelled once the
// session has ended, so work a registry started for a session can end
// with it.
func TestRegistryGetsSessionContext(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			reg := &ctxRegistry{}
			p := startPair(t, kind, newHandlerForwarder(t, echoHandler()), func(sc *ServerConfig, _ *ClientConfig) {
				reg.fakeRegistry = sc.Registry.(*fakeRegistry)
				sc.Registry = reg
			})
			// startPair returns after the welcome, which follows Attach
			// and the first Update.
			reg.mu.Lock()
			attachCtx, updateCtx := reg.attachCtx, reg.updateCtx
			reg.mu.Unlock()
			if attachCtx == nil || updateCtx == nil {
				t.Fatalf("after the welcome: Attach's context %v, Update's %v; want both set", attachCtx, updateCtx)
			}
			if err := attachCtx.Err(); err != nil {
				t.Fatalf("Attach's context of a live session: Err() = %v, want nil", err)
			}
			// stop returns after Shutdown, which waits for the session's
			// handler and so for Detach.
			p.stop()
			reg.mu.Lock()
			detachCtx, errAtDetach := reg.detachCtx, reg.errAtDetach
			reg.mu.Unlock()
			if detachCtx == nil {
				t.Fatalf("Detach not called by the time Shutdown returned")
			}
			if errAtDetach != nil {
				t.Errorf("Detach's context during Detach: Err() = %v, want nil", errAtDetach)
			}
			for name, ctx := range map[string]context.Context{"Attach": attachCtx, "Update": updateCtx, "Detach": detachCtx} {
				if !errors.Is(ctx.Err(), context.Canceled) {
					t.Errorf("%s's context after the session ended: Err() = %v, want context.Canceled", name, ctx.Err())
				}
			}
		})
	}
}

// routedRegistry is a fakeRegistry that records, during the first Update,
// whether the session already said it was routed.
type routedRegistry struct {
	*fakeRegistry

	mu                  sync.Mutex // guards the following fields
	updates             int
	routedInFirstUpdate bool
}

func (r *routedRegistry) Update(ctx context.Context, s *Session) []string {
	r.mu.Lock()
	if r.updates == 0 {
		r.routedInFirstUpdate = s.Routed()
	}
	r.updates++
	r.mu.Unlock()
	return r.fakeRegistry.Update(ctx, s)
}

// TestRoutedAfterFirstUpdate: a session says it is routed only once the
// registry has applied its first announcement, and before the client is
// welcomed; a list of connected clients built on Routed never shows a
// client whose hostnames a visitor cannot reach yet.
func TestRoutedAfterFirstUpdate(t *testing.T) {
	reg := &routedRegistry{}
	p := startPair(t, "tcp", newHandlerForwarder(t, echoHandler()), func(sc *ServerConfig, _ *ClientConfig) {
		reg.fakeRegistry = sc.Registry.(*fakeRegistry)
		sc.Registry = reg
	})
	reg.mu.Lock()
	updates, during := reg.updates, reg.routedInFirstUpdate
	reg.mu.Unlock()
	if updates == 0 {
		t.Fatal("no Update by the welcome")
	}
	if during {
		t.Error("Routed() = true during the first Update, want false until it returned")
	}
	if !p.session.Routed() {
		t.Error("Routed() = false after the welcome, want true")
	}
	if n := p.server.RoutedSessions(); n != 1 {
		t.Errorf("RoutedSessions() = %d after the welcome, want 1", n)
	}
	p.stop()
	if n := p.server.RoutedSessions(); n != 0 {
		t.Errorf("RoutedSessions() = %d after the session ended, want 0", n)
	}
}
