package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/tunnel"
)

// ErrIdle is returned by Run when the client retired after idle_timeout.
var ErrIdle = errors.New("agent: idle timeout reached")

// Run holds the tunnels, probes health and watches idleness until ctx
// ends, idle_timeout passes or a server asks the client to drain (an
// operator's POST /clients/{id}/drain, carried on a heartbeat's ack), then
// drains: it announces draining to every server, waits for them to
// acknowledge, lets in-flight requests finish (up to drain_timeout) and
// closes the tunnels. A drain asked by one of several servers retires the
// whole process. It returns nil after a drain on ctx or a server's ask,
// ErrIdle after an idle retirement, and an error wrapping ErrRefused when
// every server refused the tunnel for good, three times in a row, unless
// retry_forever is set. With debug_listen set, the debug listener opens
// first and closes last; an error opening it (the address in use) is
// returned before any tunnel is dialed.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.DebugListen != "" {
		d, err := debughttp.Listen(a.cfg.DebugListen, a.log)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		a.debugAddr.Store(d.Addr().String())
		defer a.debugAddr.Store("")
		defer d.Close()
	}
	tctx, stopTunnels := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTunnels()
	var wg sync.WaitGroup
	for _, tc := range a.tunnels {
		wg.Go(func() { tc.Run(tctx) })
	}
	pctx, stopProbes := context.WithCancel(ctx)
	a.mu.Lock()
	a.loops = pctx
	for _, svc := range a.services() {
		a.startLocked(svc)
	}
	a.mu.Unlock()
	wg.Go(func() { a.nudgeLoop(pctx) })
	st := a.openStatus()
	if st != nil {
		wg.Go(st.serve)
	}

	reason := a.waitForStop(ctx)
	idle := errors.Is(reason, ErrIdle)
	if idle {
		// The drain's announcement says why: the server reports the
		// retirement (instance_retired) to whoever scales the instances.
		a.retiring.Store(true)
	}
	// No reload from here on: the drain announces the state as it is.
	a.mu.Lock()
	a.stopped = true
	a.loops = nil
	close(a.quit)
	a.mu.Unlock()
	stopProbes()
	a.drain(reason)
	stopTunnels()
	if idle && a.cfg.IdleAction == config.IdleActionWait {
		a.waitRetired(ctx, &wg)
	}
	if st != nil {
		st.close()
	}
	wg.Wait()
	a.loopsWG.Wait()
	a.mu.Lock()
	for _, svc := range a.services() {
		a.retireLocked(svc)
	}
	a.mu.Unlock()
	return reason
}

// waitForStop blocks until ctx ends or a server asks the client to drain
// (nil), every server refused the tunnel for good (an ErrRefused), or the
// client has been idle for
// idle_timeout (ErrIdle): since its last request, or, before its first,
// since it became routable, so that an instance started for nothing (a
// cold start whose visitor gave up, a scale-out the load never reached)
// retires too. A client that never became routable waits.
func (a *Agent) waitForStop(ctx context.Context) error {
	if a.cfg.IdleTimeout <= 0 {
		select {
		case <-ctx.Done():
		case u := <-a.drainAsked:
			a.log.Info("server asked to drain", logkey.ServerURL, u)
		case err := <-a.gaveUp:
			return a.giveUp(err)
		}
		return nil
	}
	t := time.NewTimer(a.cfg.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-a.drainAsked:
			a.log.Info("server asked to drain", logkey.ServerURL, u)
			return nil
		case err := <-a.gaveUp:
			return a.giveUp(err)
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

// waitRetired keeps a client that idle_timeout retired, drained and
// with every tunnel closed, until ctx ends (SIGTERM or SIGINT): with
// idle_action wait, a supervisor that restarts exited processes (a
// Kubernetes Deployment) must not bring it back; whoever scales the
// instances removes it. The status socket keeps answering, retired, so a
// liveness probe on `aperio-client status` passes meanwhile. Nobody
// removing it within retiredWait (DefaultRetiredWait), it exits by itself
// (see DefaultRetiredWait).
func (a *Agent) waitRetired(ctx context.Context, tunnels *sync.WaitGroup) {
	tunnels.Wait()
	a.retired.Store(true)
	a.log.Info("retired (idle_action wait): drained and disconnected, waiting for SIGTERM", logkey.Timeout, a.retiredWait)
	t := time.NewTimer(a.retiredWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		a.log.Info("stopping after the retirement")
	case <-t.C:
		a.log.Warn("retired, and nobody stopped this instance: exiting so that its supervisor starts a fresh one (is the provider subscribed to instance_retired?)",
			logkey.Timeout, a.retiredWait)
	}
}

// giveUp logs why the client stops retrying and what to do, and returns
// err (which wraps ErrRefused) for Run.
func (a *Agent) giveUp(err error) error {
	code, reason := "", err.Error()
	if refused := (*tunnel.RefusedError)(nil); errors.As(err, &refused) {
		code, reason = refused.Code, refused.Reason
	}
	a.log.Error("giving up: every server refused the tunnel (retry_forever keeps trying)",
		logkey.Code, code, logkey.Reason, reason, logkey.Hint, RefusalHint(err))
	return err
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
	timeout := a.state.Load().drainTimeout
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

// probeLoop probes one service's health every interval (prober). The
// service turns healthy on the first success, and a wait_for_backend
// service is announced from then on; it turns unhealthy after threshold
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
	pr := newProber(svc)
	failures := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, detail := pr.probe(ctx, timeout)
		was := svc.healthy.Load()
		switch {
		case ok:
			failures = 0
			if !was {
				svc.healthy.Store(true)
				a.log.Info("service healthy", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Target, svc.cfg.Target)
				a.signalHealth()
			}
			// Healthy first, then announced: the first announcement of a
			// wait_for_backend service says healthy.
			if !svc.announced.Swap(true) {
				a.log.Info("service announced", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Target, svc.cfg.Target)
				a.signalHealth()
			}
			if !was && a.connected() {
				a.markRoutable()
			}
		default:
			failures++
			if was && failures >= threshold {
				svc.healthy.Store(false)
				a.log.Warn("service unhealthy", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Target, svc.cfg.Target, logkey.Reason, detail)
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
