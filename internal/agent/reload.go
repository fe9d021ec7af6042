package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// ErrStopped is returned by Apply once Run has begun its final drain: a
// client on its way out takes no new configuration.
var ErrStopped = errors.New("agent: stopped, the configuration is not applied")

// state is what Apply replaces in one swap: the services requests are
// forwarded to and announced, and the settings that change live. It is
// immutable once stored; the services' own flags (health, draining) are
// atomics of theirs.
type state struct {
	// services are the configured services in order, then the ones a
	// reload removed that are draining or withdrawn, oldest first.
	services     []*service
	expose       []config.Expose
	priority     int
	scaling      *config.Scaling
	drainTimeout time.Duration
	reloadDrain  time.Duration
}

// liveState is the state of cfg without its services.
func liveState(cfg config.Client) *state {
	return &state{
		expose:       cfg.Expose,
		priority:     cfg.Priority,
		scaling:      cfg.Scaling,
		drainTimeout: cfg.DrainTimeout,
		reloadDrain:  cfg.ReloadDrain,
	}
}

// services returns the services of the current state.
func (a *Agent) services() []*service { return a.state.Load().services }

// restartKeys names the keys that differ between old and new and that a
// running client cannot change: its tunnels, identity and process
// settings. They take effect at the next start.
func restartKeys(old, new config.Client) []string {
	var keys []string
	check := func(key string, same bool) {
		if !same {
			keys = append(keys, key)
		}
	}
	check("server.url", old.ServerURL == new.ServerURL)
	check("server.urls", slices.Equal(old.ServerURLs, new.ServerURLs))
	check("server.transport", old.Transport == new.Transport)
	check("server.token", old.Token == new.Token)
	check("name", old.Name == new.Name)
	check("idle_timeout", old.IdleTimeout == new.IdleTimeout)
	check("idle_action", old.IdleAction == new.IdleAction)
	check("status_socket", old.StatusSocket == new.StatusSocket)
	check("debug_listen", old.DebugListen == new.DebugListen)
	check("log_level", old.LogLevel == new.LogLevel)
	check("log_format", old.LogFormat == new.LogFormat)
	return keys
}

// serviceKey is what makes a service of a new configuration the same as
// one of the running configuration: its name when it has one, otherwise
// its hostnames and path (a client binds each at most once).
func serviceKey(sc config.Service) string {
	if sc.Name != "" {
		return "name\x00" + sc.Name
	}
	hs := slices.Clone(sc.Hostnames)
	slices.Sort(hs)
	return "bind\x00" + strings.Join(hs, ",") + "\x00" + sc.Path
}

// sameService reports whether two resolved services are configured alike.
// The explanation of the concurrency limit names the service's index,
// which a reload may move without changing anything.
func sameService(x, y config.Service) bool {
	x.Concurrency.Why, y.Concurrency.Why = "", ""
	return reflect.DeepEqual(x, y)
}

// sameProbe reports whether a service's health verdict carries over from x
// to y: same target, same probe.
func sameProbe(x, y config.Service) bool {
	return x.Target == y.Target && x.Serve == y.Serve && x.TLSPassthrough == y.TLSPassthrough &&
		x.Health == y.Health && x.WaitForBackend == y.WaitForBackend &&
		x.TLSServerName == y.TLSServerName && x.TLSCAFile == y.TLSCAFile && x.TLSInsecureSkipVerify == y.TLSInsecureSkipVerify &&
		x.TLSClientCert == y.TLSClientCert && x.TLSClientKey == y.TLSClientKey
}

// Apply makes cfg the running configuration without dropping a tunnel or
// a request. Services are matched to the running ones by name, or by
// hostnames and path when unnamed:
//
//   - a new service is announced at once;
//   - a changed one is replaced under its id: requests in flight finish
//     on the old settings, new ones get the new; its health carries over
//     when its target and probe are unchanged, its concurrency limiter
//     starts afresh;
//   - a removed one is announced draining (and unhealthy) and waited for
//     by every server, its requests in flight finish, for at most
//     reload_drain, and it is then withdrawn. This happens after Apply
//     returns.
//
// priority, scaling, drain_timeout and reload_drain apply too. Keys that
// cannot change while running (server.url, server.token, name, …) are
// logged by name and keep their running values. On an error nothing
// changes. Apply is safe for concurrent use; calls are serialized.
func (a *Agent) Apply(cfg config.Client) error {
	if len(cfg.Services) == 0 && len(cfg.Expose) == 0 {
		return errors.New("agent: no services or expose entries configured")
	}
	cfg.Services = slices.Clone(cfg.Services)
	cfg.ResolveConcurrency()

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return ErrStopped
	}
	old := a.state.Load()
	type match struct {
		svc  *service // the running service a new one replaces or keeps
		kept bool
	}
	live := make(map[string][]*service) // key → running services not draining
	for _, svc := range old.services {
		if !svc.draining.Load() {
			k := serviceKey(svc.cfg)
			live[k] = append(live[k], svc)
		}
	}
	next := liveState(cfg)
	matched := make(map[*service]bool)
	var added, changed []*service
	var replaced []*service // the running services changed ones replace
	id := a.nextID
	for _, sc := range cfg.Services {
		var m match
		if cands := live[serviceKey(sc)]; len(cands) > 0 {
			m.svc = cands[0]
			live[serviceKey(sc)] = cands[1:]
			matched[m.svc] = true
			m.kept = sameService(m.svc.cfg, sc)
		}
		if m.kept {
			next.services = append(next.services, m.svc)
			continue
		}
		sid := strconv.Itoa(id)
		if m.svc != nil {
			sid = m.svc.id
		} else {
			id++
		}
		svc, err := a.buildService(sid, sc)
		if err != nil {
			return err
		}
		if m.svc != nil {
			if sameProbe(m.svc.cfg, sc) {
				svc.healthy.Store(m.svc.healthy.Load())
				svc.announced.Store(m.svc.announced.Load())
			}
			changed = append(changed, svc)
			replaced = append(replaced, m.svc)
		} else {
			added = append(added, svc)
		}
		next.services = append(next.services, svc)
	}
	var removed []*service
	for _, svc := range old.services {
		switch {
		case svc.draining.Load():
			next.services = append(next.services, svc) // an earlier reload's
		case !matched[svc]:
			svc.draining.Store(true)
			removed = append(removed, svc)
		}
	}
	next.services = append(next.services, removed...)
	a.nextID = id
	if keys := restartKeys(a.cfg, cfg); len(keys) > 0 {
		a.log.Warn("settings need a restart to change", logkey.Restart, strings.Join(keys, ","))
	}
	a.state.Store(next)
	for _, svc := range slices.Concat(added, changed) {
		a.startLocked(svc)
	}
	for _, svc := range replaced {
		a.retireLocked(svc)
	}
	for _, svc := range added {
		a.log.Info("service added", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Target, svc.cfg.Target)
	}
	for _, svc := range changed {
		a.log.Info("service changed", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Target, svc.cfg.Target)
	}
	for _, svc := range removed {
		a.log.Info("service draining", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.InFlight, svc.inflight.Load(), logkey.DrainTimeout, next.reloadDrain)
	}
	a.log.Info("configuration applied", logkey.Services, len(cfg.Services))
	for _, tc := range a.tunnels {
		tc.Nudge()
	}
	if len(removed) > 0 {
		a.loopsWG.Go(func() { a.withdraw(removed, next.reloadDrain) })
	}
	a.markRoutable()
	return nil
}

// withdraw waits until every server has acknowledged that the removed
// services are draining, then for their requests in flight (at most
// drain, or until Run drains the whole client), then announces them
// withdrawn and drops them from the state once the servers acknowledged
// that too: a request dispatched before then is still served.
func (a *Agent) withdraw(removed []*service, drain time.Duration) {
	a.announceAll()
	deadline := time.NewTimer(drain)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	busy := func() bool {
		return slices.ContainsFunc(removed, func(s *service) bool { return s.inflight.Load() > 0 })
	}
wait:
	for busy() {
		select {
		case <-deadline.C:
			break wait
		case <-a.quit:
			return // Run's drain covers them now
		case <-tick.C:
		}
	}
	for _, svc := range removed {
		if n := svc.inflight.Load(); n > 0 {
			a.log.Warn("reload drain timeout reached", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name, logkey.Abandoned, n)
		}
		svc.withdrawn.Store(true)
	}
	a.announceAll()
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.state.Load()
	next := *cur
	next.services = slices.DeleteFunc(slices.Clone(cur.services), func(s *service) bool { return slices.Contains(removed, s) })
	a.state.Store(&next)
	for _, svc := range removed {
		a.retireLocked(svc)
		a.log.Info("service withdrawn", logkey.Service, svc.id, logkey.ServiceName, svc.cfg.Name)
	}
}

// announceAll sends the announcement to every connected server and waits
// for their acks, for at most announceWait each.
func (a *Agent) announceAll() {
	ctx, cancel := context.WithTimeout(context.Background(), announceWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, tc := range a.tunnels {
		wg.Go(func() { tc.AnnounceNow(ctx) })
	}
	wg.Wait()
}

// announceWait bounds the wait for a server's ack of an announcement that
// must be in force before the client goes on; a server that does not ack
// in time is treated as gone (it routes nothing here then anyway).
const announceWait = 5 * time.Second

// startLocked starts svc's probe and limiter loops, when Run is running;
// Run starts them otherwise.
func (a *Agent) startLocked(svc *service) {
	if a.loops == nil {
		return
	}
	ctx, cancel := context.WithCancel(a.loops)
	svc.stop = cancel
	if svc.cfg.Probed() {
		a.loopsWG.Go(func() { a.probeLoop(ctx, svc) })
	}
	if svc.limiter != nil && svc.limiter.Mode() == limiter.ModeLoadSignal {
		a.loopsWG.Go(func() {
			if err := svc.limiter.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.Warn("concurrency loop ended", logkey.Service, svc.id, logkey.Err, err)
			}
		})
	}
}

// retireLocked stops svc's loops and its breaker's timer; requests in
// flight on it finish regardless.
func (a *Agent) retireLocked(svc *service) {
	if svc.stop != nil {
		svc.stop()
	}
	svc.breaker.stop()
}

// countBody makes resp's body end the request's count in svc.inflight
// when it is closed. A 101 answer's body stays a ReadWriteCloser. The
// count is ended once however often the body is closed; it costs one
// allocation per request, the wrapper (a sync.OnceFunc cost three more).
func (svc *service) countBody(resp *http.Response) *http.Response {
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &countedConn{ReadWriteCloser: rwc, count: inflightCount{svc: svc}}
		return resp
	}
	if resp.Body == nil {
		svc.inflight.Add(-1)
		return resp
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, count: inflightCount{svc: svc}}
	return resp
}

// inflightCount is one request's count in svc.inflight, ended once.
type inflightCount struct {
	svc   *service
	ended atomic.Bool
}

// end ends the count; calls after the first do nothing.
func (c *inflightCount) end() {
	if c.ended.CompareAndSwap(false, true) {
		c.svc.inflight.Add(-1)
	}
}

// countedBody is a response body whose Close ends its request's count.
type countedBody struct {
	io.ReadCloser
	count inflightCount
}

func (b *countedBody) Close() error {
	defer b.count.end()
	return b.ReadCloser.Close()
}

// countedConn is countedBody for the connection of an upgrade.
type countedConn struct {
	io.ReadWriteCloser
	count inflightCount
}

func (c *countedConn) Close() error {
	defer c.count.end()
	return c.ReadWriteCloser.Close()
}
