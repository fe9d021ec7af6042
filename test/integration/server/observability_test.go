package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

// otlpReceiver is a test OTLP/HTTP collector: it decodes every export
// request and keeps the spans.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex // guards spans
	spans []*tracepb.Span
}

func startOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces with protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// trace returns the spans received with trace id traceID (hex).
func (rc *otlpReceiver) trace(traceID string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out = append(out, s)
		}
	}
	return out
}

// traceparentRe parses a W3C traceparent: version, trace id, parent id,
// flags.
var traceparentRe = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$`)

// TestObservabilityEndToEnd scripts traffic through a real server, tunnel
// and client: three requests served at once, one held for a cold start
// that the scaling hook answers by starting a client, and one refused by
// the ip limit. It then checks the figures /metrics reports, the span
// tree an OTLP receiver gets and the traceparent the backend saw, and the
// access log lines.
func TestObservabilityEndToEnd(t *testing.T) {
	receiver := startOTLPReceiver(t)
	// The same path main takes: the standard variable turns tracing on.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if !telemetry.TracingEnabled(os.Getenv) {
		t.Fatal("TracingEnabled() = false with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	tracing, err := telemetry.NewTracing(t.Context(), 1)
	if err != nil {
		t.Fatalf("NewTracing() = %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), servertest.WaitFor)
		defer cancel()
		if err := tracing.Shutdown(ctx); err != nil {
			t.Errorf("tracing Shutdown() = %v", err)
		}
	})

	var tpMu sync.Mutex
	traceparents := map[string]string{} // path → traceparent the backend saw
	backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tpMu.Lock()
		traceparents[r.URL.Path] = r.Header.Get("Traceparent")
		tpMu.Unlock()
		io.WriteString(w, "served "+r.URL.Path)
	}))

	var srv *servertest.Server
	var agentCfg config.Client
	var startOnce sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		startOnce.Do(func() { servertest.StartAgent(t, srv, agentCfg) })
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(hook.Close)

	cfg := servertest.Config(t)
	cfg.ScalingEnabled, cfg.Outbound.AllowHTTP, cfg.Outbound.AllowPrivate = true, true, true
	cfg.MetricsToken = "m-token"
	// Two tunnel handshakes and four requests take a token each: the fifth
	// request is refused.
	cfg.Router.IPLimitMax, cfg.Router.IPLimitRefill = 6, 0.0001
	access := &servertest.SyncBuffer{}
	srv = servertest.StartWith(t, cfg, nil, nil, server.Options{
		Logger:         servertest.Logger(),
		AccessLog:      slog.New(slog.NewJSONHandler(access, nil)),
		TracerProvider: tracing.Provider(),
	})
	agentCfg = servertest.AgentConfig(srv, servertest.Service(backend.URL))
	agentCfg.MaxConcurrent = 4
	agentCfg.Scaling = &config.Scaling{URL: hook.URL + "/scale", Min: 0, Max: 2, ColdStart: 30 * time.Second,
		TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute}
	visitor := servertest.NewVisitor(t, srv)

	first := servertest.StartAgent(t, srv, agentCfg)
	servertest.WaitClients(t, visitor, srv, 1)
	for _, p := range []string{"/ok/1", "/ok/2", "/ok/3"} {
		if status, body := servertest.Get(t, visitor, srv, servertest.AppHost, p); status != http.StatusOK {
			t.Fatalf("GET %s = %d %q, want 200", p, status, body)
		}
	}
	if err := first.Stop(); err != nil {
		t.Fatalf("first client Run() = %v", err)
	}
	servertest.WaitClients(t, visitor, srv, 0)

	// Nobody serves servertest.AppHost now: the request is held, the hook starts a
	// client, and the request is served by it.
	resp, body := servertest.Do(t, visitor, servertest.NewRequest(t, t.Context(), srv, "GET", servertest.AppHost, "/cold", nil))
	if resp.StatusCode != http.StatusOK || body != "served /cold" {
		t.Fatalf("GET /cold = %d %q, want 200 from the started client", resp.StatusCode, body)
	}
	if st := resp.Header.Get("Server-Timing"); !strings.HasPrefix(st, "aperio-hold;dur=") {
		t.Errorf("GET /cold Server-Timing = %q, want aperio-hold;dur=…", st)
	}
	resp, _ = servertest.Do(t, visitor, servertest.NewRequest(t, t.Context(), srv, "GET", servertest.AppHost, "/limited", nil))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fifth request = %d, want 429 from ip_limit_max 4", resp.StatusCode)
	}

	// A request is recorded after its answer left: metrics first, then
	// its access line, then its span. Once the fifth line is written,
	// every figure below is final.
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		n := len(access.Lines(t))
		return n >= 5, fmt.Sprintf("%d access lines, want 5", n)
	})
	// The hook call is counted when its answer arrives, and the hook
	// answers only after the client it started has connected: the held
	// request can be served, and all five lines written, before the
	// server has read that answer.
	coldCall := `aperio_scaling_calls_total{outcome="accepted",reason="cold_start"} 1` + "\n"
	servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
		return strings.Contains(servertest.ScrapeMetrics(t, visitor, srv, "m-token"), coldCall), "the cold-start hook call is not counted"
	})

	t.Run("metrics", func(t *testing.T) {
		m := servertest.ScrapeMetrics(t, visitor, srv, "m-token")
		for _, want := range []string{
			`aperio_requests_total{hostname="app.test",status_class="2xx"} 4`,
			`aperio_requests_total{hostname="app.test",status_class="4xx"} 1`,
			`aperio_request_duration_seconds_count{hostname="app.test"} 5`,
			`aperio_cold_start_hold_seconds_count{hostname="app.test"} 1`,
			`aperio_requests_held 0`,
			`aperio_outlier_ejections_total 0`,
			`aperio_requests_in_flight 0`,
			`aperio_connected_clients 1`,
			`aperio_rate_limited_total{limit="ip"} 1`,
			`aperio_rate_limited_total{limit="client-concurrency"} 0`,
			`aperio_rate_limited_total{limit="server-concurrency"} 0`,
			`aperio_rate_limited_total{limit="token-rate"} 0`,
			`aperio_scaling_calls_total{outcome="accepted",reason="cold_start"} 1`,
			`aperio_scaling_calls_total{outcome="error",reason="cold_start"} 0`,
			`aperio_scaling_calls_total{outcome="accepted",reason="scale_out"} 0`,
		} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if strings.Contains(m, `aperio_queue_wait_seconds_count{hostname="app.test"}`) {
			t.Errorf("/metrics has a queue wait for app.test; no request queued for a permit")
		}
		for _, re := range []string{
			`aperio_scaling_instances\{hostname="app.test",path="",record_id="[^"]+"\} 1\n`,
			`aperio_scaling_capacity\{hostname="app.test",path="",record_id="[^"]+"\} 4\n`,
			`aperio_scaling_utilization\{hostname="app.test",path="",record_id="[^"]+"\} 0\n`,
		} {
			if !regexp.MustCompile(re).MatchString(m) {
				t.Errorf("/metrics lacks a line matching %s", re)
			}
		}
		for _, dir := range []string{"in", "out"} {
			mm := regexp.MustCompile(`aperio_tunnel_bytes_total\{direction="` + dir + `"\} (\d+)`).FindStringSubmatch(m)
			if mm == nil {
				t.Errorf("/metrics lacks aperio_tunnel_bytes_total{direction=%q}", dir)
				continue
			}
			// Each of the four proxied requests crossed the tunnel both ways.
			if n, _ := strconv.Atoi(mm[1]); n < 4*len("served /ok/1") {
				t.Errorf("aperio_tunnel_bytes_total{direction=%q} = %d, want at least the response bodies", dir, n)
			}
		}
		if t.Failed() {
			t.Logf("/metrics:\n%s", m)
		}
	})

	// backendTrace returns the trace and parent span ids of the
	// traceparent the backend saw for path.
	backendTrace := func(t *testing.T, path string) (traceID, parentID string) {
		t.Helper()
		tpMu.Lock()
		tp := traceparents[path]
		tpMu.Unlock()
		mm := traceparentRe.FindStringSubmatch(tp)
		if mm == nil {
			t.Fatalf("backend saw traceparent %q for %s, want a W3C traceparent", tp, path)
		}
		return mm[1], mm[2]
	}

	t.Run("trace of the held request", func(t *testing.T) {
		traceID, parentID := backendTrace(t, "/cold")
		want := []string{telemetry.SpanRequest, telemetry.SpanRoute, telemetry.SpanColdHold, telemetry.SpanScalingHook, telemetry.SpanDispatch}
		var spans []*tracepb.Span
		servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
			spans = receiver.trace(traceID)
			return len(spans) >= len(want), spanNames(spans)
		})
		byName := map[string]*tracepb.Span{}
		for _, s := range spans {
			if byName[s.Name] != nil {
				t.Errorf("trace %s has two %s spans", traceID, s.Name)
			}
			byName[s.Name] = s
		}
		root := byName[telemetry.SpanRequest]
		if root == nil || len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Fatalf("trace %s root = %v, want a server span %s without parent (spans %s)", traceID, root, telemetry.SpanRequest, spanNames(spans))
		}
		for _, name := range want[1:] {
			s := byName[name]
			if s == nil {
				t.Errorf("trace %s lacks span %s (has %s)", traceID, name, spanNames(spans))
				continue
			}
			if !bytes.Equal(s.ParentSpanId, root.SpanId) {
				t.Errorf("span %s parent = %x, want the request span %x", name, s.ParentSpanId, root.SpanId)
			}
		}
		if d := byName[telemetry.SpanDispatch]; d != nil && hex.EncodeToString(d.SpanId) != parentID {
			t.Errorf("backend traceparent parent id = %s, want the dispatch span %x", parentID, d.SpanId)
		}
		if len(spans) != len(want) {
			t.Errorf("trace %s = %s, want exactly %v", traceID, spanNames(spans), want)
		}
	})

	t.Run("trace of a request served at once", func(t *testing.T) {
		traceID, _ := backendTrace(t, "/ok/2")
		var spans []*tracepb.Span
		servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
			spans = receiver.trace(traceID)
			return len(spans) >= 3, spanNames(spans)
		})
		if got, want := spanNames(spans), "aperio.dispatch aperio.request aperio.route"; got != want {
			t.Errorf("trace of /ok/2 = %s, want %s (no queue wait, no hold)", got, want)
		}
	})

	t.Run("access log", func(t *testing.T) {
		lines := access.Lines(t)
		byPath := map[string]map[string]any{}
		for _, l := range lines {
			if l["logger"] != "access" {
				t.Errorf("access line %v lacks logger=access", l)
			}
			if _, ok := l["ip"]; ok {
				t.Errorf("access line %v has ip with access_log_ips off", l)
			}
			byPath[l["path"].(string)] = l
		}
		if len(lines) != 5 {
			t.Errorf("access log = %d lines, want 5 (one per proxied request)", len(lines))
		}
		cold := byPath["/cold"]
		if cold == nil || cold["status"] != 200.0 || cold["hostname"] != servertest.AppHost || cold["client_id"] == "" ||
			cold["hold_ms"].(float64) <= 0 || cold["queue_wait_ms"] != 0.0 || cold["bytes"] != float64(len("served /cold")) {
			t.Errorf("access line of /cold = %v, want status 200, a client_id, hold_ms > 0, queue_wait_ms 0, bytes %d", cold, len("served /cold"))
		}
		limited := byPath["/limited"]
		if limited == nil || limited["status"] != 429.0 || limited["limit"] != "ip" || limited["client_id"] != "" {
			t.Errorf("access line of /limited = %v, want status 429, limit ip, no client_id", limited)
		}
	})
}

// spanNames lists the spans' names, sorted, for messages.
func spanNames(spans []*tracepb.Span) string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// TestServerTimingQueueWait: a request that queued behind another for the
// client's only permit carries Server-Timing aperio-queue, one that did not
// wait carries none, and server_timing off removes it. The access log,
// switched with it here, logs the wait, or nothing when off.
func TestServerTimingQueueWait(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run("server_timing="+strconv.FormatBool(on), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			backend := servertest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					arrived <- struct{}{}
					<-release
				}
				io.WriteString(w, "ok")
			}))
			cfg := servertest.Config(t)
			cfg.MetricsToken = "m-token"
			cfg.ServerTiming = on
			cfg.AccessLog = on
			access := &servertest.SyncBuffer{}
			srv := servertest.StartWith(t, cfg, nil, nil, server.Options{Logger: servertest.Logger(),
				AccessLog: slog.New(slog.NewJSONHandler(access, nil))})
			ac := servertest.AgentConfig(srv, servertest.Service(backend.URL))
			ac.MaxConcurrent = 1
			servertest.StartAgent(t, srv, ac)
			visitor := servertest.NewVisitor(t, srv)
			servertest.WaitClients(t, visitor, srv, 1)

			type answer struct {
				resp *http.Response
				err  error
			}
			send := func(path string) <-chan answer {
				ch := make(chan answer, 1)
				req := servertest.NewRequest(t, t.Context(), srv, "GET", servertest.AppHost, path, nil)
				go func() {
					resp, err := visitor.Do(req)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					ch <- answer{resp, err}
				}()
				return ch
			}
			slow := send("/slow")
			servertest.Wait(t, arrived, servertest.WaitFor, "the slow request at the backend")
			queued := send("/queued")
			servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
				m := servertest.ScrapeMetrics(t, visitor, srv, "m-token")
				return strings.Contains(m, "aperio_requests_queued 1\n"), "aperio_requests_queued is not 1"
			})
			close(release)
			a := servertest.Wait(t, slow, servertest.WaitFor, "the slow answer")
			b := servertest.Wait(t, queued, servertest.WaitFor, "the queued answer")
			if a.err != nil || b.err != nil {
				t.Fatalf("answers: slow %v, queued %v", a.err, b.err)
			}
			if st := a.resp.Header.Get("Server-Timing"); st != "" {
				t.Errorf("request that did not wait: Server-Timing = %q, want none", st)
			}
			st := b.resp.Header.Get("Server-Timing")
			if on && !strings.HasPrefix(st, "aperio-queue;dur=") {
				t.Errorf("queued request: Server-Timing = %q, want aperio-queue;dur=…", st)
			}
			if !on && st != "" {
				t.Errorf("queued request with server_timing off: Server-Timing = %q, want none", st)
			}
			// Each request is recorded after its answer left: metrics
			// first, then the access line.
			servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
				m := servertest.ScrapeMetrics(t, visitor, srv, "m-token")
				return strings.Contains(m, `aperio_request_duration_seconds_count{hostname="app.test"} 2`+"\n"), "2 requests not yet recorded"
			})
			var lines []map[string]any
			if on {
				servertest.Poll(t, servertest.WaitFor, func() (bool, string) {
					lines = access.Lines(t)
					return len(lines) >= 2, fmt.Sprintf("%d access lines, want 2", len(lines))
				})
			}
			if !on {
				if lines = access.Lines(t); len(lines) != 0 {
					t.Errorf("access_log off: %d access lines, want none", len(lines))
				}
				return
			}
			m := servertest.ScrapeMetrics(t, visitor, srv, "m-token")
			if want := `aperio_queue_wait_seconds_count{hostname="app.test"} 1`; !strings.Contains(m, want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
			waits := map[string]float64{}
			for _, l := range lines {
				waits[l["path"].(string)] = l["queue_wait_ms"].(float64)
			}
			if len(lines) != 2 || waits["/slow"] != 0 || waits["/queued"] <= 0 {
				t.Errorf("access lines' queue_wait_ms = %v (%d lines), want /slow 0 and /queued > 0", waits, len(lines))
			}
		})
	}
}
