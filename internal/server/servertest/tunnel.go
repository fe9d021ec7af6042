package servertest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// NopForwarder is a tunnel.Forwarder that answers every request with an
// error: it serves the tunnels a test opens only to be refused or counted,
// which never carry a request. Its zero value is ready to use.
type NopForwarder struct{}

// Forward returns an error and no response.
func (NopForwarder) Forward(context.Context, string, *http.Request) (*http.Response, error) {
	return nil, errors.New("no backend")
}

// Announcing returns an announcement of one healthy service on hostname,
// from a client called name (instance "i-1"), for tunnel.ClientConfig's
// Announce.
func Announcing(name, hostname string) func() tunnel.Announcement {
	return func() tunnel.Announcement {
		return tunnel.Announcement{Name: name, InstanceID: "i-1",
			Services: []tunnel.Service{{ID: "0", Hostnames: []string{hostname}, Healthy: true}}}
	}
}

// Hellos dials s with token and announce, reconnecting at once after each
// refusal (no backoff), until n sessions ended or one connected; it
// returns how many connected and the last error a session ended with. It
// blocks up to WaitFor and fails the test if no session connected and
// fewer than n ended by then.
func Hellos(t testing.TB, s *Server, token string, announce func() tunnel.Announcement, n int64) (connected int64, last error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), WaitFor)
	defer cancel()
	var (
		ended, up atomic.Int64
		mu        sync.Mutex // guards lastErr
		lastErr   error
	)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL: s.URL, Token: token, Announce: announce, Forwarder: NopForwarder{},
		Logger: Logger(),
		Jitter: func() float64 { return 0 }, // no backoff: a client hammering the server
		OnConnect: func(string) {
			up.Add(1)
			cancel()
		},
		OnDisconnect: func(err error) {
			if err != nil {
				mu.Lock()
				lastErr = err
				mu.Unlock()
			}
			if ended.Add(1) >= n {
				cancel()
			}
		},
	})
	if err != nil {
		t.Fatalf("tunnel.NewClient() = %v", err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Client.Run() = %v", err)
	}
	if ctx.Err() == context.DeadlineExceeded && up.Load() == 0 {
		t.Fatalf("%d of %d sessions ended within %s", ended.Load(), n, WaitFor)
	}
	mu.Lock()
	defer mu.Unlock()
	return up.Load(), lastErr
}

// OKForwarder is a tunnel.Forwarder that answers every request 200 with
// the body "http up", for a client whose HTTP side a test does not
// measure. Its zero value is ready to use.
type OKForwarder struct{}

// Forward answers 200 "http up".
func (OKForwarder) Forward(ctx context.Context, service string, req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	io.WriteString(rec, "http up")
	return rec.Result(), nil
}
