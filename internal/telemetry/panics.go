package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// MetricPanicsRecovered counts the panics recovered at the roots of
// request and stream goroutines since the process started; Prometheus
// shows it as aperio_panics_recovered_total.
const MetricPanicsRecovered = "aperio.panics_recovered"

// registerPanics exposes recovery.Total on m. It is read at collection
// time: recovering a panic costs nothing here.
func registerPanics(m metric.Meter) error {
	_, err := m.Int64ObservableCounter(MetricPanicsRecovered,
		metric.WithDescription("Panics recovered in request, stream and connection goroutines; each is a defect, logged with its stack."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(recovery.Total())
			return nil
		}))
	return err
}
