//go:build nootlp

package telemetry

import (
	"context"
	"errors"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrNoOTLP is NewTracing's error in a server built with -tags nootlp.
var ErrNoOTLP = errors.New("this aperio-server was built with -tags nootlp, without the OTLP exporter: unset OTEL_EXPORTER_OTLP_ENDPOINT, or use a build without the tag")

// newExporter fails: this build has no OTLP exporter.
func newExporter(context.Context) (sdktrace.SpanExporter, error) { return nil, ErrNoOTLP }
