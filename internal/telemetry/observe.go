package telemetry

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Metric names and attribute keys of the request path, declared once.
// The Prometheus exporter turns dots into underscores and adds the unit
// (_seconds) and _total for counters.
const (
	metricRequests     = "aperio.requests"
	metricDuration     = "aperio.request.duration"
	metricQueueWait    = "aperio.queue_wait"
	metricColdHold     = "aperio.cold_start.hold"
	metricAuth         = "aperio.auth"
	attrHostname       = "hostname"
	attrStatusClass    = "status_class"
	statusClassAborted = "aborted"
)

// The hostname label's bound.
const (
	// HostLabelLimit is how many distinct hostnames get a label of their
	// own, for the life of the process.
	HostLabelLimit = 200
	// HostLabelOther labels every hostname past HostLabelLimit.
	HostLabelOther = apitype.StatsOther
	// HostLabelUnrouted labels requests no bind matched; it does not count
	// against HostLabelLimit.
	HostLabelUnrouted = apitype.StatsUnrouted
)

// The access log's constants; its attribute keys are package logkey's.
const (
	// AccessLogger is the value of the "logger" attribute on every access
	// log line, so operators can tell access lines from diagnostics.
	AccessLogger = "access"
	accessMsg    = "request"
)

// Span names, declared once: the Observer starts SpanRequest, the router
// the route, wait, hold and dispatch spans, the gateway's hook caller
// SpanScalingHook. docs/observability.md describes each.
const (
	SpanRequest     = "aperio.request"
	SpanRoute       = "aperio.route"
	SpanQueueWait   = "aperio.queue_wait"
	SpanColdHold    = "aperio.cold_start_hold"
	SpanDispatch    = "aperio.dispatch"
	SpanScalingHook = "aperio.scaling_hook"
)

// ObserverConfig configures an Observer. The zero value observes nothing.
type ObserverConfig struct {
	// Meter receives the request instruments; nil records no metrics.
	Meter metric.Meter
	// AccessLog receives one line per request (access_log); nil writes
	// none. Lines are logged at Info with logger=access.
	AccessLog *slog.Logger
	// AccessLogIPs adds the visitor's address to access log lines
	// (access_log_ips). Off by default: addresses are personal data.
	AccessLogIPs bool
	// ServerTiming adds a Server-Timing header to answers that waited in
	// a queue or for a cold start (server_timing).
	ServerTiming bool
	// Tracer starts each request's span; nil means tracing is off and the
	// request path creates no span and no context.
	Tracer trace.Tracer
	// Stats counts each request in the rolling windows of GET
	// /aperio/api/stats; nil counts nothing.
	Stats *Stats
	// Hub receives each request as an access event of the live stream;
	// nil, or a hub without subscribers, publishes nothing.
	Hub *Hub
}

// Observer reports each proxied request: it wraps a Proxy, hands it a
// Request to fill, and turns the facts into metrics, an access log line,
// a Server-Timing header and a span. It is safe for concurrent use.
type Observer struct {
	cfg      ObserverConfig
	requests metric.Int64Counter
	duration metric.Float64Histogram
	wait     metric.Float64Histogram
	hold     metric.Float64Histogram
	auth     metric.Int64Counter
	hosts    *hostLabels
	prop     propagation.TraceContext
}

// secondsBuckets are the histograms' bounds, in seconds: from a
// millisecond to the longest cold start worth waiting for.
var secondsBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// NewObserver creates the request instruments on cfg.Meter.
func NewObserver(cfg ObserverConfig) (*Observer, error) {
	if cfg.AccessLog != nil {
		cfg.AccessLog = cfg.AccessLog.With(logkey.Logger, AccessLogger)
	}
	o := &Observer{cfg: cfg, hosts: newHostLabels(HostLabelLimit)}
	if cfg.Meter == nil {
		return o, nil
	}
	var err error
	m := cfg.Meter
	if o.requests, err = m.Int64Counter(metricRequests,
		metric.WithDescription("Proxied requests, by hostname and status class.")); err != nil {
		return nil, err
	}
	if o.duration, err = m.Float64Histogram(metricDuration, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...),
		metric.WithDescription("Time from a proxied request's arrival to the end of its response, by hostname.")); err != nil {
		return nil, err
	}
	if o.wait, err = m.Float64Histogram(metricQueueWait, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...),
		metric.WithDescription("Time requests that queued for a client's permit waited, by hostname.")); err != nil {
		return nil, err
	}
	if o.hold, err = m.Float64Histogram(metricColdHold, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(secondsBuckets...),
		metric.WithDescription("Time requests were held for a cold start, by hostname.")); err != nil {
		return nil, err
	}
	if o.auth, err = AuthCounter(m); err != nil {
		return nil, err
	}
	return o, nil
}

// AuthCounter returns the counter aperio_auth_total{method,outcome} on m:
// the requests a service's access gate judged, and the server's own
// logins (method admin_oidc). Creating it again on the same meter returns
// the same counter.
func AuthCounter(m metric.Meter) (metric.Int64Counter, error) {
	return m.Int64Counter(metricAuth,
		metric.WithDescription("Requests judged by a service's access gate, and the admin logins, by method and outcome."))
}

// Wrap returns the handler that observes every request next serves.
func (o *Observer) Wrap(next Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ow := writerPool.Get().(*observedWriter)
		ow.rw, ow.o = w, o
		ow.rec.Start = time.Now()
		var span trace.Span
		if o.cfg.Tracer != nil {
			// Only with tracing on does a request get a new context: off,
			// the request passes through as it came.
			ctx := o.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span = o.cfg.Tracer.Start(ctx, SpanRequest, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithTimestamp(ow.rec.Start), trace.WithAttributes(
					attribute.String("http.request.method", r.Method),
					attribute.String("server.address", r.Host),
					attribute.String("url.path", r.URL.Path)))
			r = r.WithContext(ctx)
		}
		next.Proxy(ow, r, &ow.rec)
		rec := &ow.rec
		rec.Duration = time.Since(rec.Start)
		o.record(r.Context(), rec)
		if o.cfg.Stats != nil {
			o.cfg.Stats.Record(rec)
		}
		if o.cfg.Hub.Active() {
			// Checked before anything is built: with no subscriber the
			// stream costs this one atomic load.
			o.cfg.Hub.publishAccess(r, rec)
		}
		if o.cfg.AccessLog != nil {
			o.logAccess(r, rec)
		}
		if span != nil {
			endRequestSpan(span, rec)
		}
		aborted := rec.Aborted
		*ow = observedWriter{}
		writerPool.Put(ow)
		if aborted {
			// Recorded above; now net/http ends the connection or resets
			// the stream, so the cut response cannot pass as complete.
			panic(http.ErrAbortHandler)
		}
	})
}

// record adds rec to the request instruments.
func (o *Observer) record(ctx context.Context, rec *Request) {
	if o.requests == nil {
		return
	}
	host := HostLabelUnrouted
	if rec.Routed {
		host = rec.Hostname
	}
	l := o.hosts.get(host)
	o.requests.Add(ctx, 1, l.status[statusClass(rec.Status)]...)
	o.duration.Record(ctx, rec.Duration.Seconds(), l.host...)
	if rec.QueueWait > 0 {
		o.wait.Record(ctx, rec.QueueWait.Seconds(), l.host...)
	}
	if rec.Hold > 0 {
		o.hold.Record(ctx, rec.Hold.Seconds(), l.host...)
	}
	if rec.AuthOutcome != "" {
		// Both labels come from small fixed sets (the methods' names and
		// their combinations, the outcomes), never from the visitor.
		o.auth.Add(ctx, 1, metric.WithAttributes(attribute.String("method", rec.AuthMethod), attribute.String("outcome", rec.AuthOutcome)))
	}
}

// logAccess writes rec's access log line.
func (o *Observer) logAccess(r *http.Request, rec *Request) {
	attrs := [13]slog.Attr{
		slog.String(logkey.Hostname, rec.Hostname),
		slog.String(logkey.Method, r.Method),
		slog.String(logkey.Path, r.URL.Path),
		slog.Int(logkey.Status, rec.Status),
		slog.Int64(logkey.Bytes, rec.Bytes),
		slog.Float64(logkey.DurationMS, millis(rec.Duration)),
		slog.Float64(logkey.QueueWaitMS, millis(rec.QueueWait)),
		slog.Float64(logkey.HoldMS, millis(rec.Hold)),
		slog.String(logkey.ClientID, rec.ClientID),
		slog.String(logkey.Limit, rec.Limit),
	}
	n := 10
	// The gateway sets X-Request-Id on every request before it is proxied.
	if id := r.Header["X-Request-Id"]; len(id) == 1 {
		attrs[n] = slog.String(logkey.RequestID, id[0])
		n++
	}
	if o.cfg.AccessLogIPs {
		ip := r.RemoteAddr
		if h, _, err := net.SplitHostPort(ip); err == nil {
			ip = h
		}
		attrs[n] = slog.String(logkey.IP, ip)
		n++
	}
	o.cfg.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, accessMsg, attrs[:n]...)
}

// endRequestSpan records rec on the request's span and ends it.
func endRequestSpan(span trace.Span, rec *Request) {
	attrs := [6]attribute.KeyValue{
		attribute.Int("http.response.status_code", rec.Status),
		attribute.Int64("http.response.body.size", rec.Bytes),
		attribute.String("aperio.hostname", rec.Hostname),
	}
	n := 3
	if rec.ClientID != "" {
		attrs[n] = attribute.String("aperio.client_id", rec.ClientID)
		n++
	}
	if rec.Limit != "" {
		attrs[n] = attribute.String("aperio.limit", rec.Limit)
		n++
	}
	span.SetAttributes(attrs[:n]...)
	if rec.Status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(rec.Status))
	}
	span.End(trace.WithTimestamp(rec.Start.Add(rec.Duration)))
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// statusClasses index hostLabels.status.
var statusClasses = [...]string{statusClassAborted, "1xx", "2xx", "3xx", "4xx", "5xx"}

// statusClass returns status's index in statusClasses; a request nothing
// was answered to is "aborted".
func statusClass(status int) int {
	if status < 100 || status > 599 {
		return 0
	}
	return status / 100
}

// hostOptions are one hostname's precomputed metric options: building an
// attribute set allocates, and so does a variadic argument list built at
// the call, so both are done once per hostname, not per request.
type hostOptions struct {
	host   []metric.RecordOption
	status [len(statusClasses)][]metric.AddOption
}

// hostLabels bounds the hostname label: the first limit hostnames get
// their own label, every later one shares HostLabelOther, so a flood of
// names cannot grow the metrics without bound. Reads are lock-free (an
// immutable map behind an atomic pointer, copied on the rare insert).
type hostLabels struct {
	limit int
	m     atomic.Pointer[map[string]*hostOptions]
	mu    sync.Mutex // serializes inserts
	other *hostOptions
}

func newHostLabels(limit int) *hostLabels {
	h := &hostLabels{limit: limit, other: newHostOptions(HostLabelOther)}
	m := map[string]*hostOptions{}
	h.m.Store(&m)
	return h
}

func newHostOptions(host string) *hostOptions {
	ho := &hostOptions{host: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(attrHostname, host)))}}
	for i, c := range statusClasses {
		ho.status[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(attrHostname, host), attribute.String(attrStatusClass, c)))}
	}
	return ho
}

// get returns host's options, or the shared HostLabelOther ones once limit
// hostnames have labels. HostLabelUnrouted does not count against limit.
func (h *hostLabels) get(host string) *hostOptions {
	if ho, ok := (*h.m.Load())[host]; ok {
		return ho
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.m.Load()
	if ho, ok := old[host]; ok {
		return ho
	}
	named := len(old)
	if _, ok := old[HostLabelUnrouted]; ok {
		named--
	}
	if named >= h.limit && host != HostLabelUnrouted {
		return h.other
	}
	m := make(map[string]*hostOptions, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	ho := newHostOptions(host)
	m[host] = ho
	h.m.Store(&m)
	return ho
}

// writerPool recycles observedWriters: one per request otherwise.
var writerPool = sync.Pool{New: func() any { return new(observedWriter) }}

// observedWriter records the status and body bytes of the answer, and adds
// Server-Timing to it when the request waited. It keeps Flush (streaming
// copies flush through it) and Hijack (WebSocket upgrades) working.
type observedWriter struct {
	rw          http.ResponseWriter
	o           *Observer
	rec         Request
	wroteHeader bool
}

func (w *observedWriter) Header() http.Header { return w.rw.Header() }

func (w *observedWriter) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	if status >= 200 || status == http.StatusSwitchingProtocols {
		w.wroteHeader = true
		w.rec.Status = status
		if w.o.cfg.ServerTiming {
			if v := serverTiming(&w.rec); v != "" {
				w.rw.Header()["Server-Timing"] = append(w.rw.Header()["Server-Timing"], v)
			}
		}
	}
	w.rw.WriteHeader(status)
}

func (w *observedWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.rw.Write(p)
	w.rec.Bytes += int64(n)
	return n, err
}

// Flush implements http.Flusher.
func (w *observedWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.rw).Flush()
}

// Hijack implements http.Hijacker: the connection now carries a switched
// protocol, which the answer's status records.
func (w *observedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.rw).Hijack()
	if err == nil && !w.wroteHeader {
		w.wroteHeader = true
		w.rec.Status = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *observedWriter) Unwrap() http.ResponseWriter { return w.rw }

// serverTiming returns the Server-Timing value for a request that waited,
// durations in milliseconds, or "" for one that did not.
func serverTiming(rec *Request) string {
	if rec.QueueWait <= 0 && rec.Hold <= 0 {
		return ""
	}
	var buf [64]byte
	b := buf[:0]
	if rec.QueueWait > 0 {
		b = append(b, "aperio-queue;dur="...)
		b = strconv.AppendFloat(b, millis(rec.QueueWait), 'f', 1, 64)
	}
	if rec.Hold > 0 {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, "aperio-hold;dur="...)
		b = strconv.AppendFloat(b, millis(rec.Hold), 'f', 1, 64)
	}
	return string(b)
}
