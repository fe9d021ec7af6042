package agent

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestAbandonedRequestAndLearntLimit runs an AIMD agent against a real
// tunnel server over an in-memory network, with a backend that answers
// nothing. A request the visitor abandons says nothing about the backend:
// the learnt limit stays. A request the server abandons at its response
// timeout is a timeout: the limit halves.
func TestAbandonedRequestAndLearntLimit(t *testing.T) {
	tests := []struct {
		name            string
		responseTimeout time.Duration
		visitorLeaves   bool
		want            int
	}{
		{"visitor leaves", time.Minute, true, 8},
		{"server's response timeout", 300 * time.Millisecond, false, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, reg, be := memnetAgent(t, tunnel.ServerConfig{ResponseHeaderTimeout: tt.responseTimeout}, func(cfg *config.Client) {
				cfg.Services[0].Concurrency = config.Concurrency{Mode: config.ConcurrencyAIMD, Limit: 50,
					Adaptive: config.Adaptive{Min: 1, Initial: 8, IncreaseAfterSuccesses: 10, DecreaseFactor: 0.5}}
			})
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- a.Run(ctx) }()
			defer func() {
				cancel()
				if err := recv(t, ran, "Run to return"); err != nil {
					t.Errorf("Run() = %v, want nil", err)
				}
			}()
			sess := recv(t, reg.attached, "the agent's session")

			rctx, leave := context.WithCancel(context.Background())
			defer leave()
			done := make(chan error, 1)
			go func() {
				_, err := sess.RoundTrip(httptest.NewRequest("GET", "http://app.test/slow", nil).WithContext(rctx), "0")
				done <- err
			}()
			recv(t, be.entered, "the request at the backend")
			if tt.visitorLeaves {
				leave()
			}
			if err := recv(t, done, "the abandoned request"); err == nil {
				t.Fatal("RoundTrip of an abandoned request = nil error, want one")
			}
			// The client counts a request active until Forward, which ends
			// it in the limiter, has returned: once none is, the outcome
			// is in.
			deadline := time.Now().Add(10 * time.Second)
			for a.active() > 0 {
				if time.Now().After(deadline) {
					t.Fatal("the abandoned request is still active at the client after 10s")
				}
				tick := time.NewTimer(5 * time.Millisecond)
				<-tick.C
			}
			if got := a.services()[0].limiter.Desired(); got != tt.want {
				t.Errorf("learnt limit after the request = %d, want %d", got, tt.want)
			}
		})
	}
}
