package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of every span Aperio starts.
const TracerName = "github.com/aperio-dev/aperio"

// TracingEnabled reports whether the standard OpenTelemetry environment
// turns tracing on: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and OTEL_TRACES_EXPORTER is
// not "none". getenv is os.Getenv in main.
func TracingEnabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracing is the server's tracer provider: spans are batched and sent
// over OTLP/HTTP (protobuf) to the endpoint the OTEL_EXPORTER_OTLP_*
// environment names. Create it with NewTracing; Shutdown flushes it.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// NewTracing returns a tracer provider sampling sampleRate (in [0,1]) of
// the traces that start here; a request that arrives with a traceparent
// follows its caller's sampling decision. The exporter reads the standard
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout,
// compression); the resource's service.name is aperio-server unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES says otherwise. No
// connection is made until spans are exported. A server built with
// -tags nootlp has no exporter (newExporter says so), and NewTracing fails.
func NewTracing(ctx context.Context, sampleRate float64) (*Tracing, error) {
	if sampleRate < 0 || sampleRate > 1 {
		return nil, fmt.Errorf("telemetry: otel_sample_rate %g is not in [0,1]", sampleRate)
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "aperio-server")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRate))),
	)
	return &Tracing{provider: tp}, nil
}

// Provider returns the tracer provider, for server.Options.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Shutdown exports the spans still buffered and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }
