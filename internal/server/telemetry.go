package server

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

// Outcomes of a scaling hook call, the outcome label of
// aperio_scaling_calls_total.
const (
	outcomeAccepted = "accepted" // a 2xx answer
	outcomeRejected = "rejected" // any other answer
	outcomeError    = "error"    // no answer: timeout, fence refusal, transport failure
)

var (
	callReasons  = [...]autoscale.Reason{autoscale.ReasonColdStart, autoscale.ReasonScaleOut, autoscale.ReasonScaleIn}
	callOutcomes = [...]string{outcomeAccepted, outcomeRejected, outcomeError}
)

// callCounts counts hook calls by reason and outcome, every pair present
// from the start so that rates over them never miss a series.
type callCounts [len(callReasons)][len(callOutcomes)]atomic.Int64

// observedCaller makes each scaling hook call through next, counting it
// and, with tracing on, recording it as a span: in the trace of the
// request that asked for a cold start, a trace of its own for a scale-out
// or scale-in.
type observedCaller struct {
	next   autoscale.Caller
	counts *callCounts
	tracer trace.Tracer // nil when tracing is off
}

func (c observedCaller) Call(ctx context.Context, hc autoscale.HookCall) (int, time.Duration, error) {
	var span trace.Span
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, telemetry.SpanScalingHook, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("aperio.scaling.reason", string(hc.Body.Reason)),
				attribute.String("aperio.hostname", hc.Body.Hostname),
				attribute.String("aperio.path", hc.Body.Path),
				attribute.Int("aperio.scaling.current", hc.Body.Current),
				attribute.Int("aperio.scaling.desired", hc.Body.Desired)))
	}
	status, retryAfter, err := c.next.Call(ctx, hc)
	outcome := 0 // accepted
	switch {
	case status == 0:
		outcome = 2
	case status < 200 || status > 299 || err != nil:
		outcome = 1
	}
	for i, r := range callReasons {
		if r == hc.Body.Reason {
			c.counts[i][outcome].Add(1)
		}
	}
	if span != nil {
		span.SetAttributes(attribute.String("aperio.scaling.outcome", callOutcomes[outcome]))
		if status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if outcome != 0 {
			msg := "provider answered " + strconv.Itoa(status)
			if err != nil {
				span.RecordError(err)
				msg = err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
		span.End()
	}
	return status, retryAfter, err
}
