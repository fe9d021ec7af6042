package telemetry

import (
	"context"
	"runtime"
	"runtime/metrics"

	"go.opentelemetry.io/otel/metric"
)

// MetricGoroutines is the number of goroutines of the server process now;
// Prometheus shows it as go_goroutines, the name client_golang's Go
// collector gives the same figure, so dashboards built for it work. A
// count that climbs under steady traffic is a leak (bench/soak.sh fits a
// line to it).
const MetricGoroutines = "go.goroutines"

// MetricStackInuse and MetricHeapInuse are the bytes of goroutine stacks
// and of heap spans in use (live objects, garbage not yet swept and the
// spans' unused tails), shown as go_memstats_stack_inuse_bytes and
// go_memstats_heap_inuse_bytes, the names and meanings of MemStats'
// StackInuse and HeapInuse in client_golang's Go collector. They split a
// server's memory per connected client (bench/scale-clients.sh): gctrace
// counts only the part of each stack in use, the runtime holds all of it.
const (
	MetricStackInuse = "go.memstats.stack_inuse"
	MetricHeapInuse  = "go.memstats.heap_inuse"
)

// runtimeSamples are the runtime/metrics read at each collection, in the
// order registerRuntime uses them; reading them stops nothing.
var runtimeSamples = []string{
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
}

// registerRuntime exposes runtime.NumGoroutine and the stack and heap
// figures on m, read at collection time.
func registerRuntime(m metric.Meter) error {
	_, err := m.Int64ObservableGauge(MetricGoroutines,
		metric.WithDescription("Goroutines that currently exist in the server process."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(runtime.NumGoroutine()))
			return nil
		}))
	if err != nil {
		return err
	}
	stacks, err := m.Int64ObservableGauge(MetricStackInuse, metric.WithUnit("By"),
		metric.WithDescription("Bytes of goroutine stacks the runtime holds (MemStats.StackInuse)."))
	if err != nil {
		return err
	}
	heap, err := m.Int64ObservableGauge(MetricHeapInuse, metric.WithUnit("By"),
		metric.WithDescription("Bytes of heap spans in use (MemStats.HeapInuse)."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := make([]metrics.Sample, len(runtimeSamples))
		for i, name := range runtimeSamples {
			s[i].Name = name
		}
		metrics.Read(s)
		v := func(i int) int64 {
			if s[i].Value.Kind() != metrics.KindUint64 {
				return 0 // a runtime without the metric
			}
			return int64(s[i].Value.Uint64())
		}
		o.ObserveInt64(stacks, v(0))
		o.ObserveInt64(heap, v(1)+v(2))
		return nil
	}, stacks, heap)
	return err
}
