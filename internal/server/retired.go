package server

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// retirements reports each client that retires of its own accord
// (idle_timeout: its drain announces Retiring) as one instance_retired
// event, which a provider that scales the instances (the Kubernetes one,
// lowering replicas) subscribes to. Going from one instance to zero stays
// the client's decision; the event only tells who removes the process.
// It is safe for concurrent use.
type retirements struct {
	reg *router.Registry
	hub *telemetry.Hub // the live stream's: a "retired" client event

	mu   sync.Mutex // guards seen
	seen map[*tunnel.Session]bool
}

func newRetirements(reg *router.Registry, hub *telemetry.Hub) *retirements {
	return &retirements{reg: reg, hub: hub, seen: make(map[*tunnel.Session]bool)}
}

// publish shows ev, the retirement of s, on the live stream as a client
// event "retired".
func (r *retirements) publish(s *tunnel.Session, ev events.Event) {
	if r.hub == nil || !r.hub.Active() {
		return
	}
	var hosts []string
	for _, b := range ev.Fields["binds"].([]retiredBind) {
		if !slices.Contains(hosts, b.Hostname) {
			hosts = append(hosts, b.Hostname)
		}
	}
	if hosts == nil {
		hosts = []string{}
	}
	r.hub.Emit(apitype.StreamClient, "", hosts, s.Identity().OrgID,
		apitype.StreamClientEvent{ID: s.ID(), Name: s.Announcement().Name, Hostnames: hosts, Event: apitype.ClientRetired})
}

// retiredBind is one bind of a retired instance, in the event's binds.
type retiredBind struct {
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
}

// check returns the instance_retired event of s when its announcement
// says, for the first time in the session, that it retires idle. The
// event names the binds the router accepted for the session (at most
// maxBindsNamed), the first as its hostname and path.
func (r *retirements) check(s *tunnel.Session) (events.Event, bool) {
	ann := s.Announcement()
	if !ann.Draining || ann.Retiring != tunnel.RetiringIdle {
		return events.Event{}, false
	}
	r.mu.Lock()
	first := !r.seen[s]
	r.seen[s] = true
	r.mu.Unlock()
	if !first {
		return events.Event{}, false
	}
	binds := []retiredBind{}
	var named []string
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			b := retiredBind{Hostname: h, Path: svc.Path}
			if len(binds) == maxBindsNamed || slices.Contains(binds, b) || !r.reg.Bound(s, h, svc.Path) {
				continue
			}
			binds = append(binds, b)
			named = append(named, h+svc.Path)
		}
	}
	id := s.Identity()
	minimum := 0
	if ann.Scaling != nil {
		minimum = ann.Scaling.Min
	}
	action := ann.IdleAction
	if action != "wait" {
		action = "exit" // what clients that do not say do
	}
	ev := events.Event{
		Kind: apitype.EventInstanceRetired, OrgID: id.OrgID, Actor: store.ClientActor(id.TokenID),
		Detail: fmt.Sprintf("client %s %q (instance %s) retired idle (idle_action %s), binds %s",
			s.ID(), ann.Name, ann.InstanceID, action, strings.Join(named, ", ")),
		Fields: map[string]any{
			"client_id": s.ID(), "instance_id": ann.InstanceID, "name": ann.Name, "token_id": id.TokenID,
			"reason": tunnel.RetiringIdle, "idle_action": action, "binds": binds, "min": minimum,
		},
	}
	if len(binds) > 0 {
		ev.Hostname, ev.Path = binds[0].Hostname, binds[0].Path
	}
	return ev, true
}

// forget drops what check remembers of s, at its end.
func (r *retirements) forget(s *tunnel.Session) {
	r.mu.Lock()
	delete(r.seen, s)
	r.mu.Unlock()
}
