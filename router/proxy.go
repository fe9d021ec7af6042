package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/bufpool"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/tunnel"
)

// proxyHookForTest, when set by a test, runs first on every proxied request.
var proxyHookForTest func(*http.Request)

// ServeHTTP proxies a visitor's request to a client serving its hostname;
// see Proxy. Without an Observer nothing records whether an answer has
// started, so after a recovered panic the 500 may follow a partial answer;
// the gateway always serves through an Observer. A response cut short
// (telemetry.Request.Aborted) is aborted here as the Observer would.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rec telemetry.Request
	rt.Proxy(w, r, &rec)
	if rec.Aborted {
		panic(http.ErrAbortHandler)
	}
}

// Proxy proxies a visitor's request to a client serving its hostname, and
// records in rec what it went through: the hostname, whether a bind
// matched, the client that served it, the limit that refused it, and the
// time it waited in a queue or was held for a cold start.
//
// The request runs the admission stages (admissionStages: path, the
// visitor's token bucket, maintenance, host field, route rules, route,
// body size, access, allowed_ips, the route's rate limit), then dispatch: a permit on a client of the pool,
// waiting in the pool's FIFO queue up to gateway_timeout (or held for a
// cold start) when all are busy (429 client-concurrency) or none is
// routable (504); a global slot, taken only once a client is chosen (429
// server-concurrency); then the exchange, with failover when the client
// vanishes before answering. Every refusal is answered by answer.
//
// A panic while serving the request is recovered, logged and counted
// (recovery.Total); the visitor gets 500 if nothing was answered yet.
func (rt *Router) Proxy(w http.ResponseWriter, r *http.Request, rec *telemetry.Request) {
	served := false
	defer func() {
		if !served && rec.Status == 0 {
			http.Error(w, "aperio: internal error", http.StatusInternalServerError)
		}
	}()
	defer recovery.Recover(rt.log, "proxied request")
	host := hostname.Normalize(r.Host)
	// One atomic load when nothing is captured (inspect.Lookup).
	if c := rt.cfg.Inspector.Lookup(host); c != nil {
		rt.proxyCaptured(c, w, r, rec, host)
	} else {
		rt.proxy(w, r, rec, host, nil)
	}
	served = true
}

// proxyCaptured proxies a request of a hostname the inspector captures:
// through the capture's writer and body tee, then records what the
// router measured. Refusals pass through the same writer, so they are
// captured with their status.
func (rt *Router) proxyCaptured(c *inspect.Capture, w http.ResponseWriter, r *http.Request, rec *telemetry.Request, host string) {
	ir, cw := c.Begin(w, r, rec.Start, VisitorOf(r).Proto == "https")
	if ir != nil {
		// Deferred: a request the visitor left, or that panicked, is
		// recorded too.
		defer func() { ir.Finish(rec.QueueWait, rec.Hold, rec.ClientID) }()
	}
	rt.proxy(cw, r, rec, host, ir)
}

func (rt *Router) proxy(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, host string, ir *inspect.Recording) {
	if proxyHookForTest != nil {
		proxyHookForTest(r)
	}
	a := admission{rt: rt, mode: proxyMode{}, set: rt.settingsOf(r), w: w, r: r, v: VisitorOf(r), method: r.Method, authority: r.Host, header: r.Header, host: host, path: r.URL.Path, ins: ir}
	if rt.tracer != nil {
		a.routeStart = time.Now()
	}
	a.ip = a.v.Addr
	rec.Hostname = a.host
	if ref := a.admit(r.Context(), rec); ref.kind != passed {
		rt.answer(w, r, rec, a.host, ref)
		return
	}
	if !rt.limits.takeStream(a.ip) {
		rt.refuse(w, r, rec, limitStreamsPerIP)
		return
	}
	defer rt.limits.releaseStream(a.ip)
	upgrade := tunnel.IsUpgrade(r.Header)
	if upgrade {
		if !rt.limits.takeWS() {
			w.Header()["Retry-After"] = retryAfterOne
			rt.writePage(w, r, host, visitorAnswer{status: http.StatusServiceUnavailable, reason: "too many WebSocket connections: try again in a moment"})
			return
		}
		defer rt.limits.releaseWS()
	}
	prepareOutbound(r, &a.v, upgrade, a.set.underscore)
	if err := a.gate.gate.PrepareUpstream(r.Header, a.accessVisitor(), a.dec); err != nil {
		// No identity token could be signed: the backend asked for one,
		// so the request must not reach it without.
		rt.log.Error("identity token not signed", logkey.Hostname, a.host, logkey.Err, err)
		http.Error(w, "aperio: internal error", http.StatusInternalServerError)
		return
	}
	a.set.policy.Request(r.Header, a.host, a.rule)
	if a.rule != nil && a.rule.Timeout > 0 {
		// The route's timeout replaces gateway_response_timeout.
		a.r = r.WithContext(tunnel.WithResponseTimeout(r.Context(), a.rule.Timeout))
	}
	rt.dispatch(&a, rec)
}

// dispatch runs the dispatch stages for a request that passed admission:
// cold start, permit and queue, CONNECT, global slot, then the exchange,
// re-dispatching per the failover policy.
func (rt *Router) dispatch(a *admission, rec *telemetry.Request) {
	w, r, host, body, visitor := a.w, a.r, a.host, a.body, a.ip
	ctx := r.Context()
	start := time.Now()
	stick := a.p.effective(rt.strategy) == sticky
	affinity := ""
	if stick {
		affinity = affinityFrom(r.Header)
	}
	wt := &waiter{ip: visitor, affinity: affinity}
	wait := true
	kept, err := a.keepBody()
	if err != nil {
		rt.answer(w, r, rec, host, refusal{kind: refusedExchange, err: err})
		return
	}
	if kept != nil {
		defer rt.replayKept.Add(-int64(len(kept)))
	}
	// counted is the usage counter of the client that served the request,
	// charged as it ends with the visitor's bytes both ways that were not
	// charged as they flowed (quota.go). An upgraded stream's bytes bypass
	// rec and body: respond reports them in flowed.
	var counted *usage.Counter
	var flowed flowCounts
	defer func() {
		if counted != nil {
			in := flowed.in - flowed.chargedIn
			if body != nil {
				in += body.n.Load() - body.charged.Load()
			}
			counted.Record(max(in, 0), max(rec.Bytes+flowed.out-flowed.chargedOut, 0))
		}
	}()
	timeout, _ := a.checkColdStart(ctx, wt) // the proxy's cold start refuses nothing
	var next *service                       // a permit taken for a retry on 5xx
	retried := false
	for jumps := 0; ; jumps++ {
		if kept != nil {
			r.Body = &replayBody{Reader: bytes.NewReader(kept)}
		}
		s, ref := a.takeClient(ctx, next, wt, timeout, wait, rec, &counted)
		next = nil
		if ref.kind != passed {
			rt.answer(w, r, rec, host, ref)
			return
		}
		rec.ClientID = s.conn.ID()
		body.startCharging(counted) // nil-safe: no body, or no quota to cross
		a.ins.Dispatched()          // nil-safe: nothing when not captured
		var span trace.Span
		if rt.tracer != nil {
			span = rt.startDispatch(ctx, r, rec.ClientID)
		}
		resp, err := s.conn.RoundTrip(r, s.id)
		if err != nil {
			if span != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "exchange failed")
				span.End()
			}
			rt.limits.releaseGlobal()
			if errors.Is(err, tunnel.ErrSessionClosed) && sessionEnded(s.conn) {
				// Not detached yet, but over: its permit must not pass to a
				// queued request, which would fail on it in turn. Detach
				// hands the queue to the clients left.
				s.gone.Store(true)
			}
			s.release()
			if v := body.quotaCut(); v != usage.Allowed {
				// The upload crossed a quota before any answer: refused as
				// a request over it at its start would be.
				rt.quotaCut(counted, v, host, "request body")
				rt.answer(w, r, rec, host, quotaRefusal(v))
				return
			}
			// A draining client closes its tunnel once nothing is in flight
			// on its side; a request dispatched to it just before its
			// draining announcement took effect can arrive after that, and
			// it never serves it. Drain promises visitors no failure, so such
			// a request goes to another client whatever the failover policy,
			// under the same rules (idempotent, no body byte sent, budgets).
			drained := s.draining.Load()
			if !rt.mayFailover(r, err, body, kept != nil, jumps, start, drained) {
				if !rt.serveStale(w, r) {
					rt.answer(w, r, rec, host, refusal{kind: refusedExchange, err: err})
				}
				return
			}
			rt.log.Debug("failing over", logkey.Hostname, host, logkey.From, s.conn.ID(), logkey.Err, err)
			// The next attempt must not go back to the connection that failed.
			remaining := rt.cfg.FailoverWindow - time.Since(start)
			policy := rt.failover
			if drained {
				// It will not come back: any other client, waiting for one
				// as a request arriving now would.
				policy = failoverRetryWait
			}
			switch policy {
			case failoverRetry:
				wt = &waiter{ip: visitor, exclude: s.conn}
				wait, timeout = false, remaining
			case failoverWait:
				wt = &waiter{ip: visitor, instance: s.instance, exclude: s.conn}
				wait, timeout = true, remaining
			case failoverRetryWait:
				wt = &waiter{ip: visitor, exclude: s.conn}
				wait, timeout = true, remaining
			}
			continue
		}
		if v := body.quotaCut(); v != usage.Allowed {
			// The upload crossed a quota: the backend answered a truncated
			// request; the visitor gets the quota's 429.
			resp.Body.Close()
			if span != nil {
				span.End()
			}
			rt.limits.releaseGlobal()
			s.release()
			rt.quotaCut(counted, v, host, "request body")
			rt.answer(w, r, rec, host, quotaRefusal(v))
			return
		}
		if berr := bodyFailure(r); berr != nil {
			// The visitor's body failed (too slow, malformed) before the
			// answer came: the backend answered a truncated request, since
			// the tunnel can only end the stream, not reset it. That answer
			// is not the visitor's; the body's failure is.
			resp.Body.Close()
			if span != nil {
				span.RecordError(berr)
				span.End()
			}
			rt.limits.releaseGlobal()
			s.release()
			rt.answer(w, r, rec, host, refusal{kind: refusedExchange, err: berr})
			return
		}
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		}
		rt.outliers.observe(s, resp.StatusCode)
		if !retried && rt.retryOn(resp.StatusCode) && idempotent(r.Method) && (body == nil || kept != nil) {
			// Once, and only to a client that has a permit free now: a
			// retry must not queue, or the first answer would be lost.
			if other, _ := a.p.tryAcquire(rt.strategy, &waiter{ip: visitor, exclude: s.conn}); other != nil {
				resp.Body.Close()
				if span != nil {
					span.End()
				}
				rt.limits.releaseGlobal()
				s.release()
				rt.log.Debug("retrying on 5xx", logkey.Hostname, host, logkey.From, s.conn.ID(), logkey.Status, resp.StatusCode)
				retried, next = true, other
				continue
			}
		}
		// The server's own cookies are never the backend's to set.
		access.DropServerSetCookies(resp.Header)
		if stick {
			stickTo(resp, s, affinity, a.v.Proto == "https")
		}
		responseStarted(body)
		var rh *responseHeaders
		if svc := s.headers.Load(); svc != nil || a.set.policy.HasResponseRules() {
			rh = &responseHeaders{p: a.set.policy, host: host, rule: a.rule, tls: a.v.Proto == "https", svc: svc}
		}
		flowed = rt.respond(a.set, w, r, s, resp, !a.gate.gate.Open(), rh, counted)
		if span != nil {
			span.End()
		}
		if flowed.cut == usage.Allowed {
			flowed.cut = body.quotaCut() // an upload cut after the answer began
		}
		if v := flowed.cut; v != usage.Allowed {
			rt.quotaCut(counted, v, host, "response")
			rec.Limit = v.String()
			rec.Aborted = resp.StatusCode != http.StatusSwitchingProtocols // an upgraded stream is closed already
		}
		rt.limits.releaseGlobal()
		s.release()
		return
	}
}

// recordWait adds the time wt spent queued, if it queued, to rec's queue
// wait or, for a request held for a cold start, to its hold time, and
// records it as a span when tracing is on. Requests that found a permit
// at once never queued and pay no clock read here.
func (rt *Router) recordWait(ctx context.Context, wt *waiter, rec *telemetry.Request) {
	if wt.enq.IsZero() {
		return
	}
	waited := time.Since(wt.enq)
	name := telemetry.SpanQueueWait
	if wt.held {
		rec.Hold += waited
		name = telemetry.SpanColdHold
	} else {
		rec.QueueWait += waited
	}
	if rt.tracer != nil {
		_, sp := rt.tracer.Start(ctx, name, trace.WithTimestamp(wt.enq))
		sp.End(trace.WithTimestamp(wt.enq.Add(waited)))
	}
}

// startDispatch starts the span of one exchange through the tunnel and
// puts its traceparent on the outbound request, so the backend's own
// spans join the visitor's trace. It replaces a traceparent the visitor
// sent: the visitor's is the request span's parent.
func (rt *Router) startDispatch(ctx context.Context, r *http.Request, clientID string) trace.Span {
	dctx, span := rt.tracer.Start(ctx, telemetry.SpanDispatch, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("aperio.client_id", clientID)))
	propagation.TraceContext{}.Inject(dctx, propagation.HeaderCarrier(r.Header))
	return span
}

// sessionEnded reports whether c's session is over: a *tunnel.Session
// whose Done is closed. Conns without Done (test fakes) never end.
func sessionEnded(c Conn) bool {
	d, ok := c.(interface{ Done() <-chan struct{} })
	if !ok {
		return false
	}
	select {
	case <-d.Done():
		return true
	default:
		return false
	}
}

// mayFailover reports whether a failed exchange may be re-dispatched: the
// failover policy allows it or the client was draining, the client
// vanished before any response byte, the method is idempotent (or
// failover_all_methods is set), no request body byte was sent or the body
// was kept for replay (keepBody), and the
// jump and time budgets allow it.
func (rt *Router) mayFailover(r *http.Request, err error, body *countingBody, kept bool, jumps int, start time.Time, drained bool) bool {
	if (rt.failover == failoverFail && !drained) || !errors.Is(err, tunnel.ErrSessionClosed) || r.Context().Err() != nil {
		return false
	}
	if !rt.cfg.FailoverAllMethods && !idempotent(r.Method) {
		return false
	}
	if body != nil && body.read.Load() && !kept {
		return false
	}
	return jumps < rt.cfg.FailoverMaxJumps && time.Since(start) < rt.cfg.FailoverWindow
}

// respond writes the client's response to the visitor. For a service with
// resilience, a cacheable response is recorded on its way through, and a
// client's own "backend unreachable" answer is replaced by a stale copy
// when there is one. A gated service's answers are never recorded: a
// stale copy is served without asking the gate, and one visitor's answer
// must not reach another.
//
// rh, when not nil, edits the answer's headers (the policy's response
// rules) before they are written. meter, when it has a quota, is charged
// as the body (or an upgraded stream) flows, and the copy stops once a
// quota is crossed. It returns the bytes relayed each way when the
// answer switched protocols (zero otherwise: the observed writer counts
// an ordinary answer's), those charged, and the quota that cut it.
func (rt *Router) respond(set *settings, w http.ResponseWriter, r *http.Request, s *service, resp *http.Response, gated bool, rh *responseHeaders, meter *usage.Counter) flowCounts {
	if !meter.Limited() {
		meter = nil // counted once, when the request ends
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return rt.relayUpgrade(w, r, resp, meter)
	}
	defer resp.Body.Close()
	var capture *stale.Capture
	if rt.cfg.Cache != nil && s.resilience.Load() && !gated {
		if resp.Header.Get(tunnel.ErrorHeader) == tunnel.ErrorBackend && rt.serveStale(w, r) {
			return flowCounts{}
		}
		capture = rt.cfg.Cache.Capture(r, resp)
	}
	pw := rt.paceResponse(set, w)
	complete, charged, cut := copyResponse(pw, resp, capture, rh, meter)
	pw.finish()
	capture.Finish(complete)
	return flowCounts{chargedOut: charged, cut: cut}
}

// serveStale answers with a stale copy, if the cache has one.
func (rt *Router) serveStale(w http.ResponseWriter, r *http.Request) bool {
	if rt.cfg.Cache == nil {
		return false
	}
	hit, ok := rt.cfg.Cache.Lookup(r)
	if !ok {
		return false
	}
	hit.ServeHTTP(w, r)
	return true
}

// prepareOutbound turns the visitor's request into the one the backend
// sees: hop-by-hop headers go, forwarding headers come (setForwarded), the
// Host stays.
func prepareOutbound(r *http.Request, v *Visitor, upgrade bool, act underscoreAction) {
	h := r.Header
	tunnel.RemoveHopHeaders(h, upgrade)
	delete(h, "Expect") // answered here already; the backend must not wait for it
	setForwarded(h, v, r.Host, act)
}

// copyResponse writes resp to the visitor, and every body byte also to
// capture (nil-safe), after rh (nil-safe) edited its header. A body of
// unknown length (SSE, gRPC, chunked) is flushed after every read;
// trailers follow the body. Each chunk written is charged to meter
// (nil: none), and the copy stops once that crosses a quota. It reports
// whether the whole body reached the visitor, the bytes charged, and the
// quota that stopped it (usage.Allowed: none).
func copyResponse(w http.ResponseWriter, resp *http.Response, capture *stale.Capture, rh *responseHeaders, meter *usage.Counter) (complete bool, charged int64, cut usage.Verdict) {
	dst := w.Header()
	for k, vv := range resp.Header {
		dst[k] = vv
	}
	rh.apply(dst)
	if resp.ContentLength >= 0 && resp.Header.Get("Content-Length") == "" && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		dst["Content-Length"] = []string{strconv.FormatInt(resp.ContentLength, 10)}
	}
	w.WriteHeader(resp.StatusCode)
	streaming := resp.ContentLength < 0
	buf := bufpool.NewBuf()
	flusher, _ := w.(http.Flusher)
	over := usage.Allowed // the quota the bytes so far reached
	for {
		n, err := resp.Body.Read(buf.Bytes())
		if n > 0 {
			if over != usage.Allowed {
				cut = over // reached, and there is more: cut before it goes
				break
			}
			if _, werr := w.Write(buf.Bytes()[:n]); werr != nil {
				break
			}
			capture.Write(buf.Bytes()[:n])
			if streaming && flusher != nil {
				flusher.Flush()
			}
			buf.Filled(n)
			if meter != nil {
				charged += int64(n)
				over = meter.Charge(0, int64(n))
			}
		}
		if err != nil {
			complete = err == io.EOF
			break
		}
	}
	buf.Release()
	if cut != usage.Allowed {
		return false, charged, cut // no trailers: the answer is cut short
	}
	for k, vv := range resp.Trailer {
		dst[http.TrailerPrefix+k] = vv
	}
	return complete, charged, cut
}

// relayUpgrade hands a switched-protocol connection (WebSocket) to the
// visitor and copies bytes both ways until either side closes, and
// returns how many went each way. With a meter, both ways are charged as
// they flow, and crossing a quota closes both ends.
func (rt *Router) relayUpgrade(w http.ResponseWriter, r *http.Request, resp *http.Response, meter *usage.Counter) flowCounts {
	backend := resp.Body.(io.ReadWriteCloser)
	defer backend.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rt.log.Debug("upgrade without hijack", logkey.Hostname, r.Host, logkey.Err, err)
		return flowCounts{}
	}
	defer conn.Close()
	head := countingWriter{w: brw}
	head.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(&head)
	head.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		return flowCounts{}
	}
	// Bytes the visitor sent after its request are already buffered.
	var fromVisitor, toVisitor io.Reader = brw.Reader, backend
	var cut atomic.Uint32
	var qin, qout *quotaReader
	if meter != nil {
		stop := func() { conn.Close(); backend.Close() }
		qin = &quotaReader{r: brw.Reader, c: meter, in: true, cut: &cut, stop: stop}
		qout = &quotaReader{r: backend, c: meter, cut: &cut, stop: stop}
		fromVisitor, toVisitor = qin, qout
	}
	done := make(chan struct{})
	var in int64
	go func() {
		defer close(done)
		defer recovery.Recover(rt.log, "upgrade relay")
		in, _ = bufpool.Copy(backend, fromVisitor)
		backend.Close()
	}()
	out, _ := bufpool.Copy(conn, toVisitor)
	conn.Close()
	<-done
	fc := flowCounts{in: in, out: head.n + out, cut: usage.Verdict(cut.Load())}
	if meter != nil {
		fc.chargedIn, fc.chargedOut = qin.charged, qout.charged
	}
	return fc
}

// countingWriter counts the bytes written through it: the 101 head of an
// upgrade, which the observed writer never sees.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) WriteString(s string) (int, error) {
	n, err := io.WriteString(c.w, s)
	c.n += int64(n)
	return n, err
}
