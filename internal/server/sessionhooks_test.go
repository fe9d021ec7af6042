package server

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// callLog records the steps a sessionChain takes, in order.
type callLog struct{ calls []string }

func (l *callLog) add(s string) { l.calls = append(l.calls, s) }

// fakeRouter is the router's place in a chain: it records its calls, and
// refuses Attach with refuse when set.
type fakeRouter struct {
	log    *callLog
	refuse error
}

func (r fakeRouter) Attach(context.Context, *tunnel.Session) error {
	r.log.add("router.attach")
	return r.refuse
}

func (r fakeRouter) Update(context.Context, *tunnel.Session) []string {
	r.log.add("router.update")
	return []string{"router"}
}

func (r fakeRouter) Detach(context.Context, *tunnel.Session) { r.log.add("router.detach") }

// recordingHook is a hook that records every step under its name; it
// refuses admission with refuse when set, and admits only when admits is.
func recordingHook(l *callLog, name string, admits bool, refuse error) sessionHook {
	h := sessionHook{
		name:     name,
		refused:  func(context.Context, *tunnel.Session, error) { l.add(name + ".refused") },
		attached: func(context.Context, *tunnel.Session) { l.add(name + ".attached") },
		updated: func(context.Context, *tunnel.Session) []string {
			l.add(name + ".updated")
			return []string{name}
		},
		leaving: func(context.Context, *tunnel.Session) { l.add(name + ".leaving") },
		left:    func(context.Context, *tunnel.Session) { l.add(name + ".left") },
	}
	if admits {
		h.admit = func(context.Context, *tunnel.Session) error {
			l.add(name + ".admit")
			return refuse
		}
		h.unadmit = func(*tunnel.Session) { l.add(name + ".unadmit") }
	}
	return h
}

// TestSessionChainOrder: the chain calls the router and its hooks as
// decorators nested in list order would, the first hook innermost: the
// steps after the router in list order, the steps before it (admit,
// leaving) in reverse; a refusal undoes the admits that succeeded and is
// told to every hook; the notices come router first, then each hook's.
func TestSessionChainOrder(t *testing.T) {
	refusal := errors.New("refused")
	tests := []struct {
		name        string
		refuseAt    string // "router", "b", or "" for none
		wantAttach  []string
		wantErr     bool
		checkDetach bool
	}{
		{"attached", "", []string{"c.admit", "b.admit", "router.attach", "a.attached", "b.attached", "c.attached"}, false, true},
		{"refused by the router", "router", []string{"c.admit", "b.admit", "router.attach", "b.unadmit", "c.unadmit",
			"a.refused", "b.refused", "c.refused"}, true, false},
		{"refused by a hook", "b", []string{"c.admit", "b.admit", "c.unadmit", "a.refused", "b.refused", "c.refused"}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &callLog{}
			var routerErr, bErr error
			switch tt.refuseAt {
			case "router":
				routerErr = refusal
			case "b":
				bErr = refusal
			}
			c := sessionChain{router: fakeRouter{log: l, refuse: routerErr}, hooks: []sessionHook{
				recordingHook(l, "a", false, nil),
				recordingHook(l, "b", true, bErr),
				recordingHook(l, "c", true, nil),
			}}
			err := c.Attach(t.Context(), nil)
			if (err != nil) != tt.wantErr || err != nil && !errors.Is(err, refusal) {
				t.Fatalf("Attach = %v, want refused %v", err, tt.wantErr)
			}
			if !slices.Equal(l.calls, tt.wantAttach) {
				t.Errorf("Attach steps = %q, want %q", l.calls, tt.wantAttach)
			}
			if !tt.checkDetach {
				return
			}
			l.calls = nil
			notices := c.Update(t.Context(), nil)
			if want := []string{"router.update", "a.updated", "b.updated", "c.updated"}; !slices.Equal(l.calls, want) {
				t.Errorf("Update steps = %q, want %q", l.calls, want)
			}
			if want := []string{"router", "a", "b", "c"}; !slices.Equal(notices, want) {
				t.Errorf("Update notices = %q, want %q", notices, want)
			}
			l.calls = nil
			c.Detach(t.Context(), nil)
			if want := []string{"c.leaving", "b.leaving", "a.leaving", "router.detach", "a.left", "b.left", "c.left"}; !slices.Equal(l.calls, want) {
				t.Errorf("Detach steps = %q, want %q", l.calls, want)
			}
		})
	}
}

// TestSessionHookOrder pins the order in which the gateway's features
// take part in a session's life (sessionHooks), with every feature on and
// with autoscaling and automatic TLS off.
func TestSessionHookOrder(t *testing.T) {
	names := func(hs []sessionHook) []string {
		out := make([]string, len(hs))
		for i, h := range hs {
			out[i] = h.name
		}
		return out
	}
	all := sessionHooks(&scalingHook{}, newAdmissionHook(nil, nil), nil, &acmeAsk{}, auditHook{}, streamHook{})
	if got, want := names(all), []string{"scaling", "admission", "ports", "acme", "audit", "stream"}; !slices.Equal(got, want) {
		t.Errorf("session hooks = %q, want %q", got, want)
	}
	some := sessionHooks(nil, newAdmissionHook(nil, nil), nil, nil, auditHook{}, streamHook{})
	if got, want := names(some), []string{"admission", "ports", "audit", "stream"}; !slices.Equal(got, want) {
		t.Errorf("session hooks without autoscaling and ACME = %q, want %q", got, want)
	}
}
