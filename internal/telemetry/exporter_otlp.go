//go:build !nootlp

package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newExporter returns the OTLP/HTTP span exporter, configured by the
// OTEL_EXPORTER_OTLP_* environment. It is built only when tracing is on,
// so a server without tracing holds none of its state; its code (about
// 2.2 MB of the binary, with the protobuf and gRPC packages its generated
// OTLP types link) is left out by building with -tags nootlp
// (docs/performance.md).
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	return otlptracehttp.New(ctx)
}
