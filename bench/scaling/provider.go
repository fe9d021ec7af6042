package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// hookCall is one call of the scaling hook, as the provider received it.
type hookCall struct {
	Reason   string `json:"reason"`
	Hostname string `json:"hostname"`
	Current  int    `json:"current"`
	Desired  int    `json:"desired"`
	Min      int    `json:"min"`
	Max      int    `json:"max"`

	At  time.Time `json:"-"` // when it arrived
	Key string    `json:"-"` // its Idempotency-Key
}

// maxHookBody bounds a hook call's body; the server's are some 150 bytes.
const maxHookBody = 64 << 10

// maxIdempotencyKey bounds the Idempotency-Key kept of a call.
const maxIdempotencyKey = 128

// decodeHookCall reads one call's body: JSON with a known reason and a
// hostname.
func decodeHookCall(r io.Reader) (hookCall, error) {
	var c hookCall
	if err := json.NewDecoder(io.LimitReader(r, maxHookBody)).Decode(&c); err != nil {
		return c, fmt.Errorf("hook body: %w", err)
	}
	switch c.Reason {
	case reasonColdStart, reasonScaleOut, reasonScaleIn:
	default:
		return c, fmt.Errorf("hook body: unknown reason %q", truncate(c.Reason, 40))
	}
	if c.Hostname == "" || len(c.Hostname) > 253 {
		return c, fmt.Errorf("hook body: hostname of %d bytes, want 1..253", len(c.Hostname))
	}
	return c, nil
}

// maxProviderDelay bounds how long the provider holds a call before it
// answers. It is above the servers' call timeout (10 s by default), so
// that a provider slower than the server waits for can be measured too.
const maxProviderDelay = 30 * time.Second

// provider is the scaling hook's receiver: it records every call when it
// arrives, holds it for delay (a slow provider), answers 202, and then
// runs the action registered for the call's hostname (or the default one)
// in a goroutine of its own, which close joins. A call still held when
// close is called is answered 503 at once and runs no action. It is safe
// for concurrent use.
type provider struct {
	url   string // where the hook is: http://127.0.0.1:port/scale
	srv   *http.Server
	wg    sync.WaitGroup // the actions
	ln    net.Listener
	delay time.Duration // how long each call is held before its answer
	quit  chan struct{} // closed by close: held calls end

	mu       sync.Mutex // guards the following fields
	calls    []hookCall
	bad      int // calls refused as malformed
	actions  map[string]func(hookCall)
	fallback func(hookCall)
	closed   bool
}

// newProvider returns a provider that holds each call for delay, clamped
// to 0..maxProviderDelay, without a listener (startProvider gives it one).
func newProvider(delay time.Duration) *provider {
	return &provider{delay: min(max(delay, 0), maxProviderDelay), quit: make(chan struct{}),
		actions: map[string]func(hookCall){}}
}

// startProvider starts a provider on a loopback port that holds each call
// for delay before it answers.
func startProvider(delay time.Duration) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := newProvider(delay)
	p.url, p.ln = "http://"+ln.Addr().String()+"/scale", ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.wg.Go(func() { p.srv.Serve(ln) })
	return p, nil
}

// on registers the action of the calls for hostname; nil removes it.
func (p *provider) on(hostname string, action func(hookCall)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if action == nil {
		delete(p.actions, hostname)
		return
	}
	p.actions[hostname] = action
}

// onAny registers the action of calls for hostnames without one.
func (p *provider) onAny(action func(hookCall)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fallback = action
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	c, err := decodeHookCall(r.Body)
	if err != nil {
		p.mu.Lock()
		p.bad++
		p.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.At, c.Key = now, truncate(r.Header.Get("Idempotency-Key"), maxIdempotencyKey)
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
	if p.delay > 0 {
		// A slow provider: the server's call (and its lease) stays in
		// flight meanwhile.
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-p.quit:
			t.Stop()
			http.Error(w, "provider closing", http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	p.mu.Lock()
	action := p.actions[c.Hostname]
	if action == nil {
		action = p.fallback
	}
	if action != nil && !p.closed {
		p.wg.Go(func() { action(c) })
	}
	p.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// callsFor returns the calls for hostname so far, oldest first.
func (p *provider) callsFor(hostname string) []hookCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []hookCall
	for _, c := range p.calls {
		if c.Hostname == hostname {
			out = append(out, c)
		}
	}
	return out
}

// callsBetween returns the calls that arrived in [from, to).
func (p *provider) callsBetween(from, to time.Time) []hookCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []hookCall
	for _, c := range p.calls {
		if !c.At.Before(from) && c.At.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// badCalls counts the calls refused as malformed.
func (p *provider) badCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bad
}

// close stops taking calls and waits, until ctx ends, for the running
// actions, which must themselves watch the harness's context.
func (p *provider) close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
	err := p.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("provider actions still running: %w", ctx.Err()))
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// stopProvider closes the provider of one mode's run, waiting up to 30 s
// for its calls to end.
func (h *harness) stopProvider(prov *provider) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prov.close(ctx); err != nil {
		h.logf("provider: %v", err)
	}
}
