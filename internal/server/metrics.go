package server

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names of the figures the gateway observes at collection time;
// the request path's are in telemetry. docs/observability.md lists all.
const (
	metricRateLimited  = "aperio.rate_limited"
	metricClients      = "aperio.connected_clients"
	metricInFlight     = "aperio.requests_in_flight"
	metricQueued       = "aperio.requests_queued"
	metricHeld         = "aperio.requests_held"
	metricTunnelBytes  = "aperio.tunnel_bytes"
	metricScalingCalls = "aperio.scaling_calls"
	metricUtilization  = "aperio.scaling.utilization"
	metricInstances    = "aperio.scaling.instances"
	metricCapacity     = "aperio.scaling.capacity"
	metricHooksDropped = "aperio.webhook_events_dropped"
	metricDeclCoalesce = "aperio.scaling.declarations_coalesced"
	metricDeclLate     = "aperio.scaling.declarations_late"
	metricEjections    = "aperio.outlier_ejections"
)

// registerMetrics exposes the live figures of the router, the tunnels, the
// autoscaler and the webhook queue as observable instruments, read at
// collection time: the hot path pays nothing for them beyond the counters
// it keeps anyway.
func (g *Gateway) registerMetrics() error {
	m := g.metrics.Meter()
	limited, err := m.Int64ObservableCounter(metricRateLimited,
		metric.WithDescription("Requests refused with 429, by the limit that refused them."))
	if err != nil {
		return err
	}
	clients, err := m.Int64ObservableGauge(metricClients,
		metric.WithDescription("Clients with a live tunnel."))
	if err != nil {
		return err
	}
	inflight, err := m.Int64ObservableGauge(metricInFlight,
		metric.WithDescription("Proxied requests holding a global slot."))
	if err != nil {
		return err
	}
	queued, err := m.Int64ObservableGauge(metricQueued,
		metric.WithDescription("Requests waiting in a pool's queue for a client's permit (held ones included); they hold no global slot."))
	if err != nil {
		return err
	}
	held, err := m.Int64ObservableGauge(metricHeld,
		metric.WithDescription("Requests held for a cold start now."))
	if err != nil {
		return err
	}
	tunnelBytes, err := m.Int64ObservableCounter(metricTunnelBytes,
		metric.WithDescription("Bytes through the tunnels (yamux frames, WebSocket framing excluded), by direction: in from clients, out to clients."))
	if err != nil {
		return err
	}
	calls, err := m.Int64ObservableCounter(metricScalingCalls,
		metric.WithDescription("Scaling hook calls, by reason (cold_start, scale_out, scale_in) and outcome (accepted, rejected, error)."))
	if err != nil {
		return err
	}
	ejections, err := m.Int64ObservableCounter(metricEjections,
		metric.WithDescription("Client services taken out of rotation by passive outlier ejection (outlier_consecutive_5xx answers of 5xx in a row)."))
	if err != nil {
		return err
	}
	instruments := []metric.Observable{limited, clients, inflight, queued, held, tunnelBytes, calls, ejections}
	var hooksDropped metric.Int64ObservableCounter
	if g.hooks != nil {
		hooksDropped, err = m.Int64ObservableCounter(metricHooksDropped,
			metric.WithDescription("Webhook events not delivered because the delivery queue, or their subscription's own queue (a receiver slower than its events), was full."))
		if err != nil {
			return err
		}
		instruments = append(instruments, hooksDropped)
	}
	var (
		dirIn  = metric.WithAttributes(attribute.String("direction", "in"))
		dirOut = metric.WithAttributes(attribute.String("direction", "out"))
	)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c := g.router.Counters()
		for _, l := range c.RateLimited {
			o.ObserveInt64(limited, l.N, metric.WithAttributes(attribute.String("limit", l.Kind)))
		}
		o.ObserveInt64(clients, int64(g.tunnels.RoutedSessions()))
		o.ObserveInt64(inflight, c.InFlight)
		o.ObserveInt64(queued, int64(g.registry.Queued()))
		o.ObserveInt64(held, c.Held)
		o.ObserveInt64(ejections, c.OutlierEjections)
		in, out := g.tunnels.Bytes()
		o.ObserveInt64(tunnelBytes, in, dirIn)
		o.ObserveInt64(tunnelBytes, out, dirOut)
		for i, r := range callReasons {
			for j, oc := range callOutcomes {
				o.ObserveInt64(calls, g.calls[i][j].Load(), metric.WithAttributes(
					attribute.String("reason", string(r)), attribute.String("outcome", oc)))
			}
		}
		if g.hooks != nil {
			o.ObserveInt64(hooksDropped, g.hooks.Dropped())
		}
		return nil
	}, instruments...)
	if err != nil {
		return err
	}
	if err := g.usage.registerMetric(m); err != nil {
		return err
	}
	if g.scaler == nil {
		return nil
	}
	return g.scaler.registerMetrics(m)
}

// registerMetrics exposes each scaling record's live pool: one
// series per record (records are declared by clients, one per bind, so
// their number is bounded by the binds), and the counts of declarations
// kept off the heartbeat's ack.
func (a *autoscaling) registerMetrics(m metric.Meter) error {
	util, err := m.Float64ObservableGauge(metricUtilization,
		metric.WithDescription("Permits in use over capacity of each scaling record's pool, the figure scale-out and scale-in compare with target_utilization; absent while capacity is 0."))
	if err != nil {
		return err
	}
	instances, err := m.Int64ObservableGauge(metricInstances,
		metric.WithDescription("Client instances serving each scaling record's pool (primary tier, routable)."))
	if err != nil {
		return err
	}
	capacity, err := m.Int64ObservableGauge(metricCapacity,
		metric.WithDescription("Sum of max_concurrent of the instances serving each scaling record's pool."))
	if err != nil {
		return err
	}
	coalesced, err := m.Int64ObservableCounter(metricDeclCoalesce,
		metric.WithDescription("Announcements whose scaling declarations a newer announcement of the same session replaced before they reached the store."))
	if err != nil {
		return err
	}
	late, err := m.Int64ObservableCounter(metricDeclLate,
		metric.WithDescription("Heartbeat acks sent before their announcement's scaling declarations were done, the store taking more than half a heartbeat interval."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st := a.hook.decl.Stats()
		o.ObserveInt64(coalesced, st.Coalesced)
		o.ObserveInt64(late, st.Late)
		views, err := a.ctl.List(ctx, "")
		if err != nil {
			return err
		}
		for _, v := range views {
			attrs := metric.WithAttributes(attribute.String("hostname", v.Hostname), attribute.String("path", v.Path),
				attribute.String("record_id", v.ID))
			o.ObserveInt64(instances, int64(v.Instances), attrs)
			o.ObserveInt64(capacity, int64(v.Capacity), attrs)
			if v.Capacity > 0 {
				o.ObserveFloat64(util, v.Utilization, attrs)
			}
		}
		return nil
	}, util, instances, capacity, coalesced, late)
	return err
}
