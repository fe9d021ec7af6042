package agent

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/aperio-dev/aperio/concurrency"
)

func TestOutcome(t *testing.T) {
	cases := []struct {
		name   string
		status int
		err    error
		want   concurrency.Outcome
	}{
		{"200", 200, nil, concurrency.Success},
		{"304", 304, nil, concurrency.Success},
		{"404 is the app's answer", 404, nil, concurrency.Success},
		{"101 upgrade", 101, nil, concurrency.Success},
		{"429", 429, nil, concurrency.Failure},
		{"500", 500, nil, concurrency.Failure},
		{"503", 503, nil, concurrency.Failure},
		{"504", 504, nil, concurrency.Failure},
		{"connection refused", 0, errors.New("dial tcp: connection refused"), concurrency.Failure},
		{"timeout (request abandoned)", 0, context.Canceled, concurrency.Failure},
		{"deadline", 0, context.DeadlineExceeded, concurrency.Failure},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp *http.Response
			if c.err == nil {
				resp = &http.Response{StatusCode: c.status}
			}
			if got := outcome(resp, c.err); got != c.want {
				t.Errorf("outcome(%d, %v) = %v, want %v", c.status, c.err, got, c.want)
			}
		})
	}
}
