package tunnel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// causeForwarder holds every request until its context ends and reports
// the context's cause.
type causeForwarder struct {
	started chan struct{}
	causes  chan error
}

func newCauseForwarder() *causeForwarder {
	return &causeForwarder{started: make(chan struct{}, 1), causes: make(chan error, 1)}
}

func (f *causeForwarder) Forward(ctx context.Context, _ string, req *http.Request) (*http.Response, error) {
	// As a backend's transport does, read the whole body first.
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return nil, err
	}
	f.started <- struct{}{}
	<-ctx.Done()
	f.causes <- context.Cause(ctx)
	return nil, ctx.Err()
}

// TestAbandonCause: the client tells a request the server abandoned at its
// response timeout (ErrAbandonedTimeout: the backend was too slow) from
// one abandoned earlier, by a visitor who left (ErrAbandoned only), for a
// request with a body and one without.
func TestAbandonCause(t *testing.T) {
	for _, body := range []bool{false, true} {
		name := "no body"
		if body {
			name = "body"
		}
		t.Run(name+"/visitor left", func(t *testing.T) {
			f := newCauseForwarder()
			p := startPair(t, "pipe", f, func(s *ServerConfig, _ *ClientConfig) { s.ResponseHeaderTimeout = time.Minute })
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := p.session.RoundTrip(abandonRequest(body).WithContext(ctx), "0")
				errc <- err
			}()
			waitFor(t, f.started, 10*time.Second, "the request at the client")
			cancel()
			cause := waitFor(t, f.causes, 10*time.Second, "the client's cancellation")
			if !errors.Is(cause, ErrAbandoned) || errors.Is(cause, ErrAbandonedTimeout) {
				t.Errorf("cause of a request the visitor left = %v, want ErrAbandoned and not ErrAbandonedTimeout", cause)
			}
			if err := waitFor(t, errc, 10*time.Second, "RoundTrip"); !errors.Is(err, context.Canceled) {
				t.Errorf("RoundTrip = %v, want context.Canceled", err)
			}
		})
		t.Run(name+"/response timeout", func(t *testing.T) {
			f := newCauseForwarder()
			p := startPair(t, "pipe", f, func(s *ServerConfig, _ *ClientConfig) { s.ResponseHeaderTimeout = 200 * time.Millisecond })
			errc := make(chan error, 1)
			go func() {
				_, err := p.session.RoundTrip(abandonRequest(body), "0")
				errc <- err
			}()
			waitFor(t, f.started, 10*time.Second, "the request at the client")
			if cause := waitFor(t, f.causes, 10*time.Second, "the client's cancellation"); !errors.Is(cause, ErrAbandonedTimeout) {
				t.Errorf("cause of a request abandoned at the response timeout = %v, want ErrAbandonedTimeout", cause)
			}
			if err := waitFor(t, errc, 10*time.Second, "RoundTrip"); !errors.Is(err, ErrResponseTimeout) {
				t.Errorf("RoundTrip = %v, want ErrResponseTimeout", err)
			}
		})
	}
}

// abandonRequest is a GET, or a POST with a small body.
func abandonRequest(body bool) *http.Request {
	if body {
		return httptest.NewRequest("POST", "/", strings.NewReader("payload"))
	}
	return httptest.NewRequest("GET", "/", nil)
}

// TestWithResponseTimeout: a request's own response timeout replaces the
// server's, shorter or longer.
func TestWithResponseTimeout(t *testing.T) {
	f := newCauseForwarder()
	p := startPair(t, "pipe", f, func(s *ServerConfig, _ *ClientConfig) { s.ResponseHeaderTimeout = time.Hour })
	req := abandonRequest(false)
	req = req.WithContext(WithResponseTimeout(req.Context(), 100*time.Millisecond))
	start := time.Now()
	_, err := p.session.RoundTrip(req, "0")
	if !errors.Is(err, ErrResponseTimeout) {
		t.Fatalf("RoundTrip = %v, want ErrResponseTimeout after the request's own 100ms", err)
	}
	if waited := time.Since(start); waited > time.Minute {
		t.Errorf("RoundTrip waited %s, want about 100ms", waited)
	}
	waitFor(t, f.started, 10*time.Second, "the request at the client")
}
