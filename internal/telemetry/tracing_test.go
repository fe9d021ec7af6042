package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestSampleRate: otel_sample_rate decides for traces that start here; a
// request arriving with a sampled traceparent stays sampled whatever the
// rate, one arriving unsampled stays unsampled.
func TestSampleRate(t *testing.T) {
	remote := func(sampled bool) context.Context {
		cfg := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true}
		if sampled {
			cfg.TraceFlags = trace.FlagsSampled
		}
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(cfg))
	}
	tests := []struct {
		name string
		rate float64
		ctx  context.Context
		want bool
	}{
		{"rate 1, new trace", 1, context.Background(), true},
		{"rate 0, new trace", 0, context.Background(), false},
		{"rate 0, sampled caller", 0, remote(true), true},
		{"rate 1, unsampled caller", 1, remote(false), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Nothing is exported: the endpoint is never dialled before a
			// batch is due, and Shutdown has no span to send.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			tr, err := NewTracing(t.Context(), tc.rate)
			if err != nil {
				t.Fatalf("NewTracing(%g) = %v", tc.rate, err)
			}
			defer tr.Shutdown(context.Background())
			_, span := tr.Provider().Tracer(TracerName).Start(tc.ctx, SpanRequest)
			got := span.SpanContext().IsSampled()
			if got != tc.want {
				t.Fatalf("sampled = %v, want %v", got, tc.want)
			}
			if tc.ctx != context.Background() && span.SpanContext().TraceID() != (trace.TraceID{1}) {
				t.Fatalf("span trace id = %v, want the caller's", span.SpanContext().TraceID())
			}
		})
	}
}
