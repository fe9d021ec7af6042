package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/config"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// ErrIdle is returned by Run when the client retired after idle_timeout.
var ErrIdle = errors.New("agent: idle timeout reached")

// Run holds the tunnels, probes health and watches idleness until ctx ends
// or idle_timeout passes, then drains: it announces draining, waits for the
// server to acknowledge, lets in-flight requests finish (up to
// drain_timeout) and closes the tunnels. It returns nil after a drain on
// ctx, ErrIdle after an idle retirement.
func (a *Agent) Run(ctx context.Context) error {
	tctx, stopTunnels := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTunnels()
	var wg sync.WaitGroup
	for _, tc := range a.tunnels {
		wg.Go(func() { tc.Run(tctx) })
	}
	pctx, stopProbes := context.WithCancel(ctx)
	for _, svc := range a.services {
		if svc.cfg.Health.Endpoint != "" {
			wg.Go(func() { a.probeLoop(pctx, svc) })
		}
	}
	wg.Go(func() { a.nudgeLoop(pctx) })
	a.runLimiters(pctx, &wg)
	st := a.openStatus()
	if st != nil {
		wg.Go(st.serve)
	}

	reason := a.waitForStop(ctx)
	stopProbes()
	a.drain(reason)
	stopTunnels()
	if st != nil {
		st.close()
	}
	wg.Wait()
	return reason
}

// waitForStop blocks until ctx ends (nil) or the client has been idle for
// idle_timeout (ErrIdle): since its last request, or, before its first,
// since it became routable, so that an instance started for nothing (a
// cold start whose visitor gave up, a scale-out the load never reached)
// retires too. A client that never became routable waits.
func (a *Agent) waitForStop(ctx context.Context) error {
	if a.cfg.IdleTimeout <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTimer(a.cfg.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.routable:
		}
		next := a.cfg.IdleTimeout
		last := a.lastRequest.Load()
		if last == 0 {
			last = a.routableSince.Load()
		}
		if last != 0 && a.active() == 0 {
			idle := time.Since(time.Unix(0, last))
			if idle >= a.cfg.IdleTimeout {
				a.log.Info("idle timeout reached", logkey.Idle, idle.Round(time.Second))
				return ErrIdle
			}
			next = a.cfg.IdleTimeout - idle
		}
		t.Reset(next)
	}
}

// active sums in-flight requests over every tunnel.
func (a *Agent) active() int64 {
	var n int64
	for _, tc := range a.tunnels {
		n += tc.Active()
	}
	return n
}

// drain stops new work and waits for in-flight requests, bounded by
// drain_timeout.
func (a *Agent) drain(reason error) {
	a.draining.Store(true)
	timeout := a.cfg.DrainTimeout
	if timeout <= 0 {
		timeout = config.DefaultClient().DrainTimeout
	}
	deadline := time.Now().Add(timeout)
	a.log.Info("draining", logkey.InFlight, a.active(), logkey.DrainTimeout, timeout)
	// Tell every server; a server that does not ack in time is treated as
	// gone (it routes nothing here then anyway).
	actx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, timeout))
	var wg sync.WaitGroup
	for _, tc := range a.tunnels {
		wg.Go(func() { tc.AnnounceNow(actx) })
	}
	wg.Wait()
	cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for a.active() > 0 && time.Now().Before(deadline) {
		<-tick.C
	}
	if n := a.active(); n > 0 {
		a.log.Warn("drain timeout reached", logkey.Abandoned, n)
	} else {
		a.log.Info("drained")
	}
}

// nudgeLoop announces health and limit changes promptly instead of
// waiting for the next heartbeat, at most once per minAnnounceGap: changes
// within a gap go out together in the next announcement.
func (a *Agent) nudgeLoop(ctx context.Context) {
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.healthChange:
		case <-a.limitChange:
		}
		for _, tc := range a.tunnels {
			tc.Nudge()
		}
		gap.Reset(minAnnounceGap)
		select {
		case <-ctx.Done():
			return
		case <-gap.C:
		}
	}
}

// probeLoop probes one service's health endpoint every interval. The
// service turns healthy on the first success and unhealthy after threshold
// consecutive failures.
func (a *Agent) probeLoop(ctx context.Context, svc *service) {
	h, def := svc.cfg.Health, config.DefaultClient().Health
	interval, timeout, threshold := h.Interval, h.Timeout, h.Threshold
	if interval <= 0 {
		interval = def.Interval
	}
	if timeout <= 0 {
		timeout = def.Timeout
	}
	if threshold <= 0 {
		threshold = def.Threshold
	}
	u := *svc.target
	if u.Scheme == "h2c" {
		u.Scheme = "http"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + h.Endpoint
	probeURL := u.String()
	client := &http.Client{
		Transport: svc.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	failures := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, detail := probe(ctx, client, probeURL, timeout)
		was := svc.healthy.Load()
		switch {
		case ok:
			failures = 0
			if !was {
				svc.healthy.Store(true)
				a.log.Info("service healthy", logkey.Service, svc.id, logkey.Target, svc.cfg.Target)
				a.signalHealth()
				if a.connected() {
					a.markRoutable()
				}
			}
		default:
			failures++
			if was && failures >= threshold {
				svc.healthy.Store(false)
				a.log.Warn("service unhealthy", logkey.Service, svc.id, logkey.Target, svc.cfg.Target, logkey.Reason, detail)
				a.signalHealth()
			}
		}
		t.Reset(interval)
	}
}

func (a *Agent) signalHealth() {
	select {
	case a.healthChange <- struct{}{}:
	default:
	}
}

// probe performs one health check: any 2xx or 3xx within timeout passes.
func probe(ctx context.Context, c *http.Client, u string, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "aperio-client health probe")
	resp, err := c.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 400 {
		return true, ""
	}
	return false, resp.Status
}
