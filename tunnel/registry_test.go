package tunnel

import (
	"context"
	"errors"
	"testing"
	"time"
)

// ctxRegistry is a fakeRegistry that keeps the context of each call and
// whether it was live when the call was made.
type ctxRegistry struct {
	*fakeRegistry
	attachCtx, updateCtx, detachCtx chan context.Context
	liveAtDetach                    chan error
}

func (r *ctxRegistry) Attach(ctx context.Context, s *Session) error {
	r.attachCtx <- ctx
	return r.fakeRegistry.Attach(ctx, s)
}

func (r *ctxRegistry) Update(ctx context.Context, s *Session) []string {
	select {
	case r.updateCtx <- ctx:
	default:
	}
	return r.fakeRegistry.Update(ctx, s)
}

func (r *ctxRegistry) Detach(ctx context.Context, s *Session) {
	r.liveAtDetach <- ctx.Err()
	r.detachCtx <- ctx
	r.fakeRegistry.Detach(ctx, s)
}

// TestRegistryGetsSessionContext: every registry call of a session gets
// the session's context, live through Detach and cancelled once the
// session has ended, so work a registry started for a session can end
// with it.
func TestRegistryGetsSessionContext(t *testing.T) {
	for _, kind := range connKinds {
		t.Run(kind, func(t *testing.T) {
			reg := &ctxRegistry{attachCtx: make(chan context.Context, 1), updateCtx: make(chan context.Context, 1),
				detachCtx: make(chan context.Context, 1), liveAtDetach: make(chan error, 1)}
			p := startPair(t, kind, newHandlerForwarder(t, echoHandler()), func(sc *ServerConfig, _ *ClientConfig) {
				reg.fakeRegistry = sc.Registry.(*fakeRegistry)
				sc.Registry = reg
			})
			attachCtx := recv(t, reg.attachCtx, "Attach")
			updateCtx := recv(t, reg.updateCtx, "Update")
			if err := attachCtx.Err(); err != nil {
				t.Fatalf("Attach's context of a live session: Err() = %v, want nil", err)
			}
			p.stop()
			if err := recv(t, reg.liveAtDetach, "Detach"); err != nil {
				t.Errorf("Detach's context during Detach: Err() = %v, want nil", err)
			}
			detachCtx := recv(t, reg.detachCtx, "Detach")
			for name, ctx := range map[string]context.Context{"Attach": attachCtx, "Update": updateCtx, "Detach": detachCtx} {
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("%s's context still live 10s after the session ended", name)
				}
				if !errors.Is(ctx.Err(), context.Canceled) {
					t.Errorf("%s's context after the session ended: Err() = %v, want context.Canceled", name, ctx.Err())
				}
			}
		})
	}
}

// recv returns the next value of ch, failing t after 10 s without one.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s call within 10s", what)
		var zero T
		return zero
	}
}
