package autoscale

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/outbound"
)

// hookRecorder is a provider endpoint that records what it received.
type hookRecorder struct {
	mu     sync.Mutex // guards the following fields
	header http.Header
	body   map[string]any
	method string
	calls  int
}

func (h *hookRecorder) handler(status int, extra http.Header) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls++
		h.header, h.method = r.Header.Clone(), r.Method
		h.body = nil
		if err == nil {
			json.Unmarshal(b, &h.body)
		}
		for k, v := range extra {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
	})
}

func loopbackCaller(t *testing.T) *HTTPCaller {
	t.Helper()
	fc, err := outbound.New(outbound.Policy{AllowHTTP: true, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	return NewHTTPCaller(fc)
}

func testCall(url string) HookCall {
	return HookCall{URL: url, Secret: "s3cret", IdempotencyKey: "key-1",
		Body: HookBody{Reason: ReasonColdStart, Hostname: "app.example.com", Current: 0, Desired: 1, Min: 0, Max: 8}}
}

func TestHTTPCallerSendsTheContract(t *testing.T) {
	rec := &hookRecorder{}
	srv := httptest.NewServer(rec.handler(http.StatusAccepted, nil))
	t.Cleanup(srv.Close)
	call := testCall(srv.URL)
	call.Body.LeaseGeneration = 42
	status, _, err := loopbackCaller(t).Call(context.Background(), call)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("Call() = %d, %v, want 202, nil", status, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	checks := []struct{ got, want string }{
		{rec.method, "POST"},
		{rec.header.Get("Content-Type"), "application/json"},
		{rec.header.Get("Authorization"), "Bearer s3cret"},
		{rec.header.Get("Idempotency-Key"), "key-1"},
		{rec.header.Get("Aperio-Lease-Generation"), "42"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("hook request field = %q, want %q", c.got, c.want)
		}
	}
	if ua := rec.header.Get("User-Agent"); !strings.HasPrefix(ua, "aperio/") {
		t.Errorf("User-Agent = %q, want aperio/<version>", ua)
	}
	var keys []string
	for k := range rec.body {
		keys = append(keys, k)
	}
	if len(keys) != 9 || rec.body["reason"] != "cold_start" || rec.body["path"] != nil || rec.body["org_id"] != nil ||
		rec.body["lease_generation"] != float64(42) {
		t.Errorf("hook body = %v, want exactly the 8 keys of autoscaling.md with null path and org_id, and lease_generation 42", rec.body)
	}
}

// TestHTTPCallerNoLeaseNoGeneration: a call made without a lease (the
// store unreachable) carries no Aperio-Lease-Generation header, and a
// null lease_generation, which no provider may take as an old one.
func TestHTTPCallerNoLeaseNoGeneration(t *testing.T) {
	rec := &hookRecorder{}
	srv := httptest.NewServer(rec.handler(http.StatusAccepted, nil))
	t.Cleanup(srv.Close)
	if _, _, err := loopbackCaller(t).Call(context.Background(), testCall(srv.URL)); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if h, ok := rec.header["Aperio-Lease-Generation"]; ok {
		t.Errorf("Aperio-Lease-Generation = %q, want no header", h)
	}
	if g, ok := rec.body["lease_generation"]; !ok || g != nil {
		t.Errorf("lease_generation = %v (present %v), want null", g, ok)
	}
}

func TestHTTPCallerFailures(t *testing.T) {
	t.Run("non-2xx with Retry-After", func(t *testing.T) {
		rec := &hookRecorder{}
		srv := httptest.NewServer(rec.handler(http.StatusServiceUnavailable, http.Header{"Retry-After": {"7"}}))
		t.Cleanup(srv.Close)
		status, retry, err := loopbackCaller(t).Call(context.Background(), testCall(srv.URL))
		var ce *CallError
		if status != 503 || retry != 7*time.Second || !errors.As(err, &ce) || ce.Status != 503 {
			t.Fatalf("Call() to a 503 = %d, %v, %v, want 503, 7s, *CallError", status, retry, err)
		}
	})
	t.Run("redirect not followed", func(t *testing.T) {
		target := &hookRecorder{}
		tsrv := httptest.NewServer(target.handler(200, nil))
		t.Cleanup(tsrv.Close)
		rec := &hookRecorder{}
		srv := httptest.NewServer(rec.handler(http.StatusFound, http.Header{"Location": {tsrv.URL}}))
		t.Cleanup(srv.Close)
		status, _, err := loopbackCaller(t).Call(context.Background(), testCall(srv.URL))
		if status != 302 || err == nil {
			t.Fatalf("Call() to a redirect = %d, %v, want 302 and an error", status, err)
		}
		target.mu.Lock()
		defer target.mu.Unlock()
		if target.calls != 0 {
			t.Fatalf("redirect target contacted %d times, want 0", target.calls)
		}
	})
	t.Run("fence refusal", func(t *testing.T) {
		strict, err := outbound.New(outbound.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		status, _, err := NewHTTPCaller(strict).Call(context.Background(), testCall("http://127.0.0.1:9/scale"))
		var refused *outbound.RefusedError
		if status != 0 || !errors.As(err, &refused) {
			t.Fatalf("Call() to plain http on loopback under the strict fence = %d, %v, want 0 and a RefusedError", status, err)
		}
	})
	t.Run("no secret, no Authorization", func(t *testing.T) {
		rec := &hookRecorder{}
		srv := httptest.NewServer(rec.handler(200, nil))
		t.Cleanup(srv.Close)
		c := testCall(srv.URL)
		c.Secret = ""
		if _, _, err := loopbackCaller(t).Call(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if _, ok := rec.header["Authorization"]; ok {
			t.Fatalf("Authorization sent without a secret: %q", rec.header.Get("Authorization"))
		}
	})
}
