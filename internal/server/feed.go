package server

import (
	"context"
	"slices"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/tunnel"
)

// The admin API's figures and live stream (GET /aperio/api/stats and
// /stream): the Observer counts and publishes each request, and this file
// adapts the rest: the router's queues, the tunnel sessions' comings and
// goings, the autoscaler's calls.

// trafficView is admin.Traffic over the Observer's Stats and the
// router's queues.
type trafficView struct {
	stats *telemetry.Stats
	reg   *router.Registry
}

func (v trafficView) Read(keep func(string) bool) telemetry.StatsReading { return v.stats.Read(keep) }
func (v trafficView) Held(keep func(string) bool) int                    { return v.reg.QueuedOn(keep) }

// streamHook publishes each session that attached and detached as a
// client event of the live stream, and counts nothing when nobody
// follows it: the "stream" session hook.
type streamHook struct {
	hub *telemetry.Hub
}

// hook returns the live stream's part in a session's life.
func (r streamHook) hook() sessionHook {
	return sessionHook{
		name:     "stream",
		attached: func(_ context.Context, s *tunnel.Session) { r.publish(s, apitype.ClientConnected) },
		left:     func(_ context.Context, s *tunnel.Session) { r.publish(s, apitype.ClientDisconnected) },
	}
}

func (r streamHook) publish(s *tunnel.Session, event string) {
	if !r.hub.Active() {
		return
	}
	ann := s.Announcement()
	var hosts []string
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			if !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	ev := apitype.StreamClientEvent{ID: s.ID(), Name: ann.Name, Hostnames: hosts, Event: event}
	if ev.Hostnames == nil {
		ev.Hostnames = []string{}
	}
	r.hub.Emit(apitype.StreamClient, "", hosts, s.Identity().OrgID, ev)
}

// streamEvents passes the autoscaler's events on to webhooks (next), and
// counts and publishes each for the admin API's figures and stream.
type streamEvents struct {
	next  events.Sink
	hub   *telemetry.Hub
	stats *telemetry.Stats
}

func (e streamEvents) Publish(em events.Event) {
	e.next.Publish(em)
	ev, ok := em.Data.(autoscale.Event)
	if !ok {
		return // only the autoscaler's events come this way
	}
	e.stats.Scaling(ev.Hostname, ev.At)
	if !e.hub.Active() {
		return
	}
	instances := ev.Desired
	if ev.Type == apitype.EventScalingDisarmed {
		instances = ev.Current
	}
	e.hub.Emit(apitype.StreamScaling, ev.Hostname, nil, "", apitype.StreamScalingEvent{
		Hostname: ev.Hostname, Path: ev.Path, Action: ev.Type, Reason: string(ev.Reason), Instances: instances, At: ev.At.UTC(),
	})
}
