package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/tunnel"
)

func TestOutcome(t *testing.T) {
	live := context.Background()
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	cases := []struct {
		name   string
		ctx    context.Context
		status int
		err    error
		want   limiter.Outcome
	}{
		{"200", live, 200, nil, limiter.Success},
		{"304", live, 304, nil, limiter.Success},
		{"404 is the app's answer", live, 404, nil, limiter.Success},
		{"101 upgrade", live, 101, nil, limiter.Success},
		{"429", live, 429, nil, limiter.Failure},
		{"500", live, 500, nil, limiter.Failure},
		{"503", live, 503, nil, limiter.Failure},
		{"504", live, 504, nil, limiter.Failure},
		{"connection refused", live, 0, errors.New("dial tcp: connection refused"), limiter.Failure},
		{"backend timeout of the transport's own", live, 0, fmt.Errorf("net/http: timeout awaiting response headers: %w", context.DeadlineExceeded), limiter.Failure},
		{"server gave up at its response timeout", cancelled(tunnel.ErrAbandonedTimeout), 0, context.Canceled, limiter.Failure},
		{"visitor left", cancelled(tunnel.ErrAbandoned), 0, context.Canceled, limiter.Ignored},
		{"tunnel closed", cancelled(nil), 0, context.Canceled, limiter.Ignored},
		{"answer raced the visitor leaving", cancelled(tunnel.ErrAbandoned), 500, nil, limiter.Failure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp *http.Response
			if c.err == nil {
				resp = &http.Response{StatusCode: c.status}
			}
			if got := outcome(c.ctx, resp, c.err); got != c.want {
				t.Errorf("outcome(cause %v, %d, %v) = %v, want %v", context.Cause(c.ctx), c.status, c.err, got, c.want)
			}
		})
	}
}
