package telemetry

import (
	"context"
	"runtime"

	"go.opentelemetry.io/otel/metric"
)

// MetricGoroutines is the number of goroutines of the server process now;
// Prometheus shows it as go_goroutines, the name client_golang's Go
// collector gives the same figure, so dashboards built for it work. A
// count that climbs under steady traffic is a leak (bench/soak.sh fits a
// line to it).
const MetricGoroutines = "go.goroutines"

// registerRuntime exposes runtime.NumGoroutine on m, read at collection
// time.
func registerRuntime(m metric.Meter) error {
	_, err := m.Int64ObservableGauge(MetricGoroutines,
		metric.WithDescription("Goroutines that currently exist in the server process."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(runtime.NumGoroutine()))
			return nil
		}))
	return err
}
