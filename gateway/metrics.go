package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerMetrics exposes the live figures of the router, the tunnels and
// the webhook queue as observable instruments, read at collection time:
// the hot path pays nothing for them.
func (g *Gateway) registerMetrics() error {
	m := g.metrics.Meter()
	limited, err := m.Int64ObservableCounter("aperio.rate_limited",
		metric.WithDescription("Requests refused with 429, by the limit that refused them."))
	if err != nil {
		return err
	}
	clients, err := m.Int64ObservableGauge("aperio.connected_clients",
		metric.WithDescription("Clients with a live tunnel."))
	if err != nil {
		return err
	}
	inflight, err := m.Int64ObservableGauge("aperio.requests_in_flight",
		metric.WithDescription("Proxied requests holding a global slot."))
	if err != nil {
		return err
	}
	queued, err := m.Int64ObservableGauge("aperio.requests_queued",
		metric.WithDescription("Requests waiting in a pool's queue for a client's permit; they hold no global slot."))
	if err != nil {
		return err
	}
	instruments := []metric.Observable{limited, clients, inflight, queued}
	var hooksDropped metric.Int64ObservableCounter
	if g.hooks != nil {
		hooksDropped, err = m.Int64ObservableCounter("aperio.webhook_events_dropped",
			metric.WithDescription("Autoscaling events not delivered to webhooks because the delivery queue was full."))
		if err != nil {
			return err
		}
		instruments = append(instruments, hooksDropped)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for kind, n := range g.router.RateLimited() {
			o.ObserveInt64(limited, n, metric.WithAttributes(attribute.String("limit", kind)))
		}
		o.ObserveInt64(clients, int64(g.router.ConnectedClients()))
		o.ObserveInt64(inflight, g.router.InFlight())
		o.ObserveInt64(queued, int64(g.router.Queued()))
		if g.hooks != nil {
			o.ObserveInt64(hooksDropped, g.hooks.Dropped())
		}
		return nil
	}, instruments...)
	return err
}
