package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// scriptedProxy plays the router's part: it records the facts it is given
// and answers status with body.
type scriptedProxy struct {
	facts  Request
	status int
	body   string
}

func (p *scriptedProxy) Proxy(w http.ResponseWriter, r *http.Request, rec *Request) {
	rec.Hostname, rec.Routed, rec.ClientID, rec.Limit = p.facts.Hostname, p.facts.Routed, p.facts.ClientID, p.facts.Limit
	rec.QueueWait, rec.Hold = p.facts.QueueWait, p.facts.Hold
	if p.status != 0 {
		w.WriteHeader(p.status)
	}
	if p.body != "" {
		io.WriteString(w, p.body)
	}
}

// scrape returns the Prometheus text m serves.
func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer tok")
	m.Handler("tok").ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", rec.Code)
	}
	return rec.Body.String()
}

func newTestObserver(t testing.TB, cfg ObserverConfig) (*Observer, *Metrics) {
	t.Helper()
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(t.Context()) })
	cfg.Meter = m.Meter()
	o, err := NewObserver(cfg)
	if err != nil {
		t.Fatalf("NewObserver() = %v", err)
	}
	return o, m
}

func serve(h http.Handler, host, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://"+host+path, nil)
	req.RemoteAddr = "203.0.113.7:4242"
	h.ServeHTTP(rec, req)
	return rec
}

func TestObserverMetrics(t *testing.T) {
	o, m := newTestObserver(t, ObserverConfig{})
	ok := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, ClientID: "c1"}, body: "hello"}
	waited := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, ClientID: "c1", QueueWait: 30 * time.Millisecond}, body: "x"}
	held := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, ClientID: "c2", Hold: 2 * time.Second}, body: "y"}
	limited := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, Limit: "ip"}, status: 429}
	unrouted := &scriptedProxy{facts: Request{Hostname: "nobody.test"}, status: 502}
	left := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true}}
	for _, p := range []*scriptedProxy{ok, ok, ok, waited, held, limited, unrouted} {
		serve(o.Wrap(p), p.facts.Hostname, "/")
	}
	left.body = "" // the visitor left: nothing is written
	serve(o.Wrap(left), "app.test", "/")

	body := scrape(t, m)
	for _, want := range []string{
		`aperio_requests_total{hostname="app.test",status_class="2xx"} 5`,
		`aperio_requests_total{hostname="app.test",status_class="4xx"} 1`,
		`aperio_requests_total{hostname="app.test",status_class="aborted"} 1`,
		`aperio_requests_total{hostname="__unrouted",status_class="5xx"} 1`,
		`aperio_request_duration_seconds_count{hostname="app.test"} 7`,
		`aperio_queue_wait_seconds_count{hostname="app.test"} 1`,
		`aperio_queue_wait_seconds_sum{hostname="app.test"} 0.03`,
		`aperio_queue_wait_seconds_bucket{hostname="app.test",le="0.025"} 0`,
		`aperio_queue_wait_seconds_bucket{hostname="app.test",le="0.05"} 1`,
		`aperio_cold_start_hold_seconds_count{hostname="app.test"} 1`,
		`aperio_cold_start_hold_seconds_sum{hostname="app.test"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

func TestHostLabelsBounded(t *testing.T) {
	h := newHostLabels(3)
	for i := range 3 {
		if got := h.get(fmt.Sprintf("h%d.test", i)); got == h.other {
			t.Fatalf("get(h%d.test) = __other, want its own label (limit 3)", i)
		}
	}
	if got := h.get(HostLabelUnrouted); got == h.other {
		t.Fatalf("get(%s) = __other, want its own label: it does not count against the limit", HostLabelUnrouted)
	}
	if got := h.get("h3.test"); got != h.other {
		t.Fatalf("get(h3.test) after 3 named hosts = its own label, want __other")
	}
	if got, again := h.get("h1.test"), h.get("h1.test"); got == h.other || got != again {
		t.Fatalf("get(h1.test) again = %p, %p; want the same own label", got, again)
	}
	if n := len(*h.m.Load()); n != 4 {
		t.Fatalf("labels kept = %d, want 4 (3 hosts and %s)", n, HostLabelUnrouted)
	}
}

func TestHostLabelOtherInMetrics(t *testing.T) {
	o, m := newTestObserver(t, ObserverConfig{})
	for i := range HostLabelLimit + 5 {
		host := fmt.Sprintf("h%d.test", i)
		serve(o.Wrap(&scriptedProxy{facts: Request{Hostname: host, Routed: true}, body: "ok"}), host, "/")
	}
	body := scrape(t, m)
	if want := `aperio_requests_total{hostname="__other",status_class="2xx"} 5`; !strings.Contains(body, want) {
		t.Errorf("/metrics after %d hostnames lacks %q", HostLabelLimit+5, want)
	}
	if n := strings.Count(body, "aperio_requests_total{"); n != HostLabelLimit+1 {
		t.Errorf("aperio_requests_total series = %d, want %d (the limit and __other)", n, HostLabelLimit+1)
	}
}

// accessLine serves one request through an Observer writing JSON access
// lines and returns the line, decoded.
func accessLine(t *testing.T, ips bool, p *scriptedProxy) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	o, _ := newTestObserver(t, ObserverConfig{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil)), AccessLogIPs: ips})
	serve(o.Wrap(p), p.facts.Hostname, "/some/path")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("access log = %d lines %q, want 1", len(lines), buf.String())
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("access line %q is not JSON: %v", lines[0], err)
	}
	return line
}

func TestAccessLog(t *testing.T) {
	p := &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, ClientID: "sess-1",
		QueueWait: 1500 * time.Microsecond, Hold: 2 * time.Second}, body: "hello"}
	line := accessLine(t, false, p)
	want := map[string]any{
		"msg": "request", "level": "INFO", "logger": "access",
		"hostname": "app.test", "method": "GET", "path": "/some/path", "status": 200.0, "bytes": 5.0,
		"queue_wait_ms": 1.5, "hold_ms": 2000.0, "client_id": "sess-1", "limit": "",
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("access line %s = %v, want %v", k, line[k], v)
		}
	}
	if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
		t.Errorf("access line duration_ms = %v, want a non-negative number", line["duration_ms"])
	}
	if ip, ok := line["ip"]; ok {
		t.Errorf("access line has ip %v with access_log_ips off, want none", ip)
	}

	refused := accessLine(t, true, &scriptedProxy{facts: Request{Hostname: "app.test", Routed: true, Limit: "client-concurrency"}, status: 429})
	if refused["ip"] != "203.0.113.7" || refused["limit"] != "client-concurrency" || refused["status"] != 429.0 {
		t.Errorf("access line with access_log_ips = ip %v limit %v status %v, want 203.0.113.7 client-concurrency 429",
			refused["ip"], refused["limit"], refused["status"])
	}
}

func TestServerTiming(t *testing.T) {
	tests := []struct {
		name  string
		on    bool
		facts Request
		want  string
	}{
		{"no wait", true, Request{}, ""},
		{"queued", true, Request{QueueWait: 12340 * time.Microsecond}, "aperio-queue;dur=12.3"},
		{"held", true, Request{Hold: 1500 * time.Millisecond}, "aperio-hold;dur=1500.0"},
		{"both", true, Request{QueueWait: time.Millisecond, Hold: 2 * time.Millisecond}, "aperio-queue;dur=1.0, aperio-hold;dur=2.0"},
		{"switched off", false, Request{QueueWait: time.Second, Hold: time.Second}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := newTestObserver(t, ObserverConfig{ServerTiming: tc.on})
			rec := serve(o.Wrap(&scriptedProxy{facts: tc.facts, body: "x"}), "app.test", "/")
			if got := rec.Header().Get("Server-Timing"); got != tc.want {
				t.Fatalf("Server-Timing = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestObservedWriterFlushes(t *testing.T) {
	o, _ := newTestObserver(t, ObserverConfig{})
	var flushed bool
	h := o.Wrap(proxyFunc(func(w http.ResponseWriter, r *http.Request, rec *Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("observed writer is not an http.Flusher")
			return
		}
		io.WriteString(w, "data: 1\n\n")
		f.Flush()
		flushed = true
	}))
	rec := serve(h, "app.test", "/")
	if !flushed || !rec.Flushed || rec.Body.String() != "data: 1\n\n" {
		t.Fatalf("after Flush: flushed %v, recorder flushed %v, body %q; want true, true, the event", flushed, rec.Flushed, rec.Body.String())
	}
}

type proxyFunc func(w http.ResponseWriter, r *http.Request, rec *Request)

func (f proxyFunc) Proxy(w http.ResponseWriter, r *http.Request, rec *Request) { f(w, r, rec) }

func TestTracingEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "None"}, false},
		{"exporter otlp", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := TracingEnabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("TracingEnabled(%v) = %v, want %v", tc.env, got, tc.want)
			}
		})
	}
}

func TestNewTracingRejectsBadRate(t *testing.T) {
	for _, rate := range []float64{-0.1, 1.01} {
		if _, err := NewTracing(t.Context(), rate); err == nil {
			t.Errorf("NewTracing(rate %g) = nil error, want one", rate)
		}
	}
}

// TestObserverAllocatesNothing pins the cost of observing a request with
// tracing off and no access log: metrics and the Server-Timing check add
// no allocation to what the proxy itself does.
func TestObserverAllocatesNothing(t *testing.T) {
	o, _ := newTestObserver(t, ObserverConfig{ServerTiming: true})
	h := o.Wrap(proxyFunc(func(w http.ResponseWriter, r *http.Request, rec *Request) {
		rec.Hostname, rec.Routed = "app.test", true
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest("GET", "http://app.test/", nil)
	w := &headerOnlyWriter{h: http.Header{}}
	h.ServeHTTP(w, req) // the hostname's label is made once
	allocs := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) })
	if allocs != 0 {
		t.Fatalf("observing a request allocates %v times, want 0", allocs)
	}
}

type headerOnlyWriter struct{ h http.Header }

func (w *headerOnlyWriter) Header() http.Header         { return w.h }
func (w *headerOnlyWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *headerOnlyWriter) WriteHeader(int)             {}
