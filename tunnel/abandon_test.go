package tunnel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/testkit/poll"
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

// endlessBody yields bytes until it is closed, as an endless stream from a
// backend does (an event stream, a large download).
type endlessBody struct {
	once   sync.Once
	closed chan struct{}
}

func (b *endlessBody) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	clear(p)
	return len(p), nil
}

func (b *endlessBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

// endlessForwarder answers every request with an endless body.
type endlessForwarder struct{ bodies chan *endlessBody }

func (f endlessForwarder) Forward(context.Context, string, *http.Request) (*http.Response, error) {
	b := &endlessBody{closed: make(chan struct{})}
	f.bodies <- b
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, ContentLength: -1, Body: b}, nil
}

// TestAbandonedResponseEndsAtClient: the server closes the stream of a
// response it no longer wants (its visitor left) while the client is
// blocked writing into the full stream window. yamux's close is a
// half-close, so the client's write would wait out the stream's close
// timeout (30 s), the request counted in flight and the backend's response
// open; the client ends it at once instead.
func TestAbandonedResponseEndsAtClient(t *testing.T) {
	f := endlessForwarder{bodies: make(chan *endlessBody, 1)}
	p := startPair(t, "pipe", f, nil)
	resp, err := p.session.RoundTrip(abandonRequest(false), "0")
	if err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	body := waitFor(t, f.bodies, 10*time.Second, "the request at the client")
	if _, err := io.ReadFull(resp.Body, make([]byte, 1024)); err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	// The client goes on writing until the stream's window is full: the
	// server's side no longer reads once it closed.
	resp.Body.Close()
	select {
	case <-body.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the client still copies the abandoned response 10s after the server closed its stream")
	}
	poll.Until(t, 5*time.Second, "no request in flight at the client once the abandoned response ended", func() bool {
		return p.client.active.Load() == 0
	})
}
