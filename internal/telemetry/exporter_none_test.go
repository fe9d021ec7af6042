//go:build nootlp

package telemetry

import (
	"errors"
	"testing"
)

// TestNoOTLPBuild runs under `go test -tags nootlp` (make test runs it): a
// server built without the exporter refuses to start tracing, with the
// reason, rather than dropping spans silently.
func TestNoOTLPBuild(t *testing.T) {
	if _, err := NewTracing(t.Context(), 1); !errors.Is(err, ErrNoOTLP) {
		t.Fatalf("NewTracing() in a nootlp build = %v, want ErrNoOTLP", err)
	}
}
