package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/concurrency"
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
		want   concurrency.Outcome
	}{
		{"200", live, 200, nil, concurrency.Success},
		{"304", live, 304, nil, concurrency.Success},
		{"404 is the app's answer", live, 404, nil, concurrency.Success},
		{"101 upgrade", live, 101, nil, concurrency.Success},
		{"429", live, 429, nil, concurrency.Failure},
		{"500", live, 500, nil, concurrency.Failure},
		{"503", live, 503, nil, concurrency.Failure},
		{"504", live, 504, nil, concurrency.Failure},
		{"connection refused", live, 0, errors.New("dial tcp: connection refused"), concurrency.Failure},
		{"backend timeout of the transport's own", live, 0, fmt.Errorf("net/http: timeout awaiting response headers: %w", context.DeadlineExceeded), concurrency.Failure},
		{"server gave up at its response timeout", cancelled(tunnel.ErrAbandonedTimeout), 0, context.Canceled, concurrency.Failure},
		{"visitor left", cancelled(tunnel.ErrAbandoned), 0, context.Canceled, concurrency.Ignored},
		{"tunnel closed", cancelled(nil), 0, context.Canceled, concurrency.Ignored},
		{"answer raced the visitor leaving", cancelled(tunnel.ErrAbandoned), 500, nil, concurrency.Failure},
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
