package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/policy/policytest"
	"github.com/aperio-dev/aperio/tunnel"
)

// BenchmarkAdmission measures route selection and admission, the work the
// router does per request before the tunnel: match the hostname among 1,000
// (half exact, half wildcard), pick one of 10 clients (10,000 in all) with a
// free permit, and release it.
func BenchmarkAdmission(b *testing.B) {
	rt := newRouter(b, Config{})
	hosts := make([]string, 1000)
	for h := range hosts {
		pattern := fmt.Sprintf("app%d.example.com", h)
		hosts[h] = pattern
		if h%2 == 1 {
			pattern = fmt.Sprintf("*.tenant%d.example.com", h)
			hosts[h] = fmt.Sprintf("www.tenant%d.example.com", h)
		}
		for c := range 10 {
			rt.reg.update(newConn(fmt.Sprintf("c%d-%d", h, c), h*10+c), limited(100, pattern))
		}
	}
	if n := rt.reg.ConnectedClients(); n != 10000 {
		b.Fatalf("ConnectedClients() = %d, want 10000", n)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p := rt.reg.table.Load().match(hosts[i%len(hosts)], "/index.html")
		s, _ := p.tryAcquire(rt.strategy, nil)
		if s == nil {
			b.Fatal("no permit")
		}
		s.release()
	}
}

func TestAdmissionAllocatesNothing(t *testing.T) {
	rt := newRouter(t, Config{})
	rt.reg.update(newConn("a", 1), limited(10, "*.example.com"))
	rt.reg.update(newConn("b", 2), limited(10, "*.example.com"))
	allocs := testing.AllocsPerRun(1000, func() {
		p := rt.reg.table.Load().match("www.example.com", "/")
		s, _ := p.tryAcquire(rt.strategy, nil)
		s.release()
	})
	if allocs != 0 {
		t.Fatalf("match+acquire+release allocates %v times per request, want 0", allocs)
	}
}

// TestAdmitAllocatesNothing pins the admission stages' cost in the proxy:
// a stage's verdict carries the values a dry run's step would name, and
// only a dry run renders its detail, so a request that passes every stage
// (the ip bucket, a route rule with a rate limit, the bind, an open gate)
// allocates nothing in admit.
func TestAdmitAllocatesNothing(t *testing.T) {
	rt := newRouter(t, Config{IPLimitMax: 1 << 30, IPLimitRefill: 1 << 30, Policy: policy.Config{
		RateLimits: []policy.RateLimit{{Name: "api", Rate: 1 << 30, Burst: 1 << 30}},
		Routes:     []policy.Route{{Path: "/api", Policy: &policy.RoutePolicy{RateLimit: "api"}}},
	}})
	rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
	r := httptest.NewRequest(http.MethodGet, "http://app.test/api/x", nil)
	w := &discardWriter{h: http.Header{}}
	var rec telemetry.Request
	allocs := testing.AllocsPerRun(1000, func() {
		a := admission{rt: rt, mode: proxyMode{}, set: rt.settingsOf(r), w: w, r: r, v: VisitorOf(r), method: r.Method, authority: r.Host, header: r.Header, host: "app.test", path: r.URL.Path}
		a.ip = a.v.Addr
		if ref := a.admit(r.Context(), &rec); ref.kind != passed {
			t.Fatalf("admit(GET app.test/api/x) = refusal kind %d, want passed", ref.kind)
		}
	})
	if allocs != 0 {
		t.Fatalf("admit allocates %v times per request, want 0", allocs)
	}
}

// benchConn answers every request with the same small body, keeping
// nothing, so a benchmark measures the router and not its fake.
type benchConn struct{ fakeConn }

func (c *benchConn) RoundTrip(req *http.Request, service string) (*http.Response, error) {
	return &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		ContentLength: 5,
		Body:          io.NopCloser(strings.NewReader("hello")),
	}, nil
}

// discardWriter is a ResponseWriter that keeps only its header map.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkServeHTTP measures one whole proxied request in the router, the
// tunnel faked: the ip bucket, the route, a permit, the global slot, the
// exchange and the copy of a 5-byte response.
func BenchmarkServeHTTP(b *testing.B) {
	benchRequests(b, benchRouter(b, nil))
}

// BenchmarkServeHTTPPolicy is BenchmarkServeHTTP with a traffic policy
// of 50 route rules (exact, wildcard and host-less globs, none matching
// the request, so every index list is tried) and 10 header rules (one of
// them setting a response header of app.example.com).
func BenchmarkServeHTTPPolicy(b *testing.B) {
	benchRequests(b, benchRouterWith(b, nil, policytest.Config(50, 10)))
}

// benchRouter returns a router with one client serving app.example.com.
func benchRouter(b *testing.B, tracer trace.Tracer) *Router {
	return benchRouterWith(b, tracer, policy.Config{})
}

// benchRouterWith is benchRouter with a traffic policy.
func benchRouterWith(b *testing.B, tracer trace.Tracer, pc policy.Config) *Router {
	rt := newRouter(b, Config{IPLimitMax: 1 << 30, IPLimitRefill: 1 << 30, MaxConcurrentRequests: 100, Tracer: tracer, Policy: pc})
	rt.reg.update(&benchConn{fakeConn{id: "c1", at: epoch}}, limited(100, "app.example.com"))
	return rt
}

// benchRequests sends b.N requests for app.example.com to h.
func benchRequests(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "http://app.example.com/index.html", nil)
	w := &discardWriter{}
	b.ReportAllocs()
	for b.Loop() {
		req.Header = http.Header{}
		w.h = http.Header{}
		h.ServeHTTP(w, req)
	}
}

// BenchmarkObservedServeHTTP is BenchmarkServeHTTP behind the server's
// telemetry.Observer with request metrics and Server-Timing, then also a
// JSON access log line per request (to io.Discard), then also tracing
// (every request sampled, spans recorded but not exported). Tracing off
// means no tracer at all: no span, no context.
func BenchmarkObservedServeHTTP(b *testing.B) {
	for _, tc := range []struct {
		name            string
		access, tracing bool
	}{
		{"metrics", false, false},
		{"metrics+access_log", true, false},
		{"metrics+access_log+tracing", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := telemetry.NewMetrics()
			if err != nil {
				b.Fatal(err)
			}
			ocfg := telemetry.ObserverConfig{Meter: m.Meter(), ServerTiming: true}
			if tc.access {
				ocfg.AccessLog = slog.New(slog.NewJSONHandler(io.Discard, nil))
			}
			if tc.tracing {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
				b.Cleanup(func() { tp.Shutdown(context.Background()) })
				ocfg.Tracer = tp.Tracer(telemetry.TracerName)
			}
			o, err := telemetry.NewObserver(ocfg)
			if err != nil {
				b.Fatal(err)
			}
			benchRequests(b, o.Wrap(benchRouter(b, ocfg.Tracer)))
		})
	}
}

// BenchmarkServeHTTPGated is BenchmarkServeHTTP for services behind a
// gate: the visitor's credential checked on every request (bearer; basic
// with its verification remembered after the first), the backend request
// readied without it and with the identity headers.
func BenchmarkServeHTTPGated(b *testing.B) {
	for _, tc := range []struct {
		name   string
		access *tunnel.Access
		authz  string
	}{
		{"bearer", &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}, "Bearer " + testKey},
		{"basic", &tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"ann": testBcrypt(b, "pw")}}}}, basicAuth("ann", "pw")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := newRouter(b, Config{IPLimitMax: 1 << 30, IPLimitRefill: 1 << 30, MaxConcurrentRequests: 100})
			a := limited(100, "app.example.com")
			a.Services[0].Access = tc.access
			rt.reg.update(&benchConn{fakeConn{id: "c1", at: epoch}}, a)
			req := httptest.NewRequest(http.MethodGet, "http://app.example.com/index.html", nil)
			w := &statusWriter{}
			b.ReportAllocs()
			for b.Loop() {
				req.Header = http.Header{"Authorization": {tc.authz}}
				w.h, w.code = http.Header{}, 0
				rt.ServeHTTP(w, req)
				if w.code != 0 && w.code != http.StatusOK {
					b.Fatalf("status %d: the gate refused the credential", w.code)
				}
			}
		})
	}
}

// statusWriter is a discardWriter that keeps the status written.
type statusWriter struct {
	discardWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code }
