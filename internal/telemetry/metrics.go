// Package telemetry owns the server's observability plumbing: the
// OpenTelemetry meter provider that packages record into, and the
// Prometheus text endpoint that exposes it (at /aperio/metrics).
package telemetry

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics is the server's meter provider with its Prometheus exporter.
// Create it with NewMetrics; it is safe for concurrent use.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	registry *promclient.Registry
}

// NewMetrics returns a meter provider whose instruments Handler exposes.
// Each Metrics has its own registry: nothing is registered globally.
func NewMetrics() (*Metrics, error) {
	reg := promclient.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	m := &Metrics{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), registry: reg}
	if err := registerPanics(m.Meter()); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if err := registerRuntime(m.Meter()); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return m, nil
}

// Meter returns the meter instruments are created on.
func (m *Metrics) Meter() metric.Meter { return m.provider.Meter("github.com/aperio-dev/aperio") }

// Handler serves the Prometheus text format to requests bearing token. With
// an empty token the endpoint does not exist (404), so metrics are never
// public by accident. The token is compared as SHA-256 digests in constant
// time, so neither its bytes nor its length leak through timing.
func (m *Metrics) Handler(token string) http.Handler {
	prom := m.Exposition()
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			http.NotFound(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		digest := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(digest[:], want[:]) != 1 || !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics need Authorization: Bearer <metrics_token>", http.StatusUnauthorized)
			return
		}
		prom.ServeHTTP(w, r)
	})
}

// Exposition serves the Prometheus text format to every request, with no
// check: for a listener of its own that only the operator reaches.
func (m *Metrics) Exposition() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Shutdown stops the provider; later collections return nothing.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.provider.Shutdown(ctx) }
