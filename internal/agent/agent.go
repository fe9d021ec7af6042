// Package agent owns the aperio-client process: it turns the client's
// configuration into tunnels to every configured server, forwards the
// requests they carry to the local targets, probes the targets' health,
// and drains gracefully on shutdown, after idle_timeout or when a server
// asks it to (an operator's drain, carried on a heartbeat's ack).
package agent

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/tunnel"
)

// Options are the parts of an Agent that are not configuration.
type Options struct {
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// DialServer dials the server's TCP connection (tests inject pipes);
	// nil uses net.Dialer.
	DialServer func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSConfig is used for https server URLs; nil uses the defaults.
	TLSConfig *tls.Config
	// StatusSocket overrides the status_socket setting (tests); empty
	// keeps the setting.
	StatusSocket string
	// RetiredWait bounds how long a client retired with idle_action wait
	// waits for its signal (tests shorten it); 0 is DefaultRetiredWait.
	RetiredWait time.Duration
}

// DefaultRetiredWait is how long a client that idle_timeout retired with
// idle_action wait waits for its signal before it exits by itself. Whoever
// removes the instance (a provider lowering replicas on instance_retired)
// does so within seconds; past this bound the event was lost or ignored
// (replicas already at min, a StatefulSet removing another ordinal), and
// the process exits so that its supervisor restarts a fresh instance that
// connects and serves, instead of a pod that counts as a replica, serves
// nothing and leaves a later cold start's visitors waiting.
const DefaultRetiredWait = 30 * time.Second

// Agent runs one client process. Create it with New and start it with Run.
type Agent struct {
	// cfg is the configuration the agent started with. Its services and
	// the keys a reload changes live (see state) are read from state, not
	// from here.
	cfg        config.Client
	log        *slog.Logger
	instanceID string
	tunnels    []*tunnel.Client
	// state is the current service set and live settings, swapped whole
	// by Apply: a request and an announcement see one state or the next,
	// never a mix.
	state atomic.Pointer[state]

	mu sync.Mutex // guards the following fields
	// nextID is the id of the next service a reload adds: ids are never
	// reused, so a server never mistakes a new service for a removed one.
	nextID int
	// loops is the context the services' probe and limiter loops run
	// under; nil before Run starts them and after Run stopped them.
	loops context.Context
	// stopped is set once Run stops taking reloads.
	stopped bool
	// loopsWG joins the services' loops and the reloads' withdrawals.
	loopsWG sync.WaitGroup
	// quit is closed when Run starts its drain: a withdrawal still waiting
	// for a removed service's requests stops waiting.
	quit chan struct{}

	draining atomic.Bool
	// retiring is set when idle_timeout retires the client: its drain's
	// announcement says so (Announcement.Retiring).
	retiring atomic.Bool
	// retired is set once a client retired with idle_action wait has
	// closed its tunnels and waits for its signal.
	retired      atomic.Bool
	retiredWait  time.Duration // Options.RetiredWait
	served       atomic.Int64  // requests answered since start
	lastRequest  atomic.Int64  // unix nanoseconds of the last request's end
	exposed      exposedTable  // the servers' answers to the expose entries
	healthChange chan struct{}
	// limitChange is signalled when a service's concurrency limit moved;
	// nudgeLoop announces it, at most once per minAnnounceGap.
	limitChange  chan struct{}
	statusSocket string
	// debugAddr is the debug listener's address (debug_listen) while Run
	// serves it, "" otherwise.
	debugAddr atomic.Value // string

	// routableSince is when the client first became routable (a tunnel
	// up and a service healthy), unix nanoseconds; 0 until then. Without a
	// request, idle_timeout counts from it. routable is signalled once, as
	// it is set.
	routableSince atomic.Int64
	routable      chan struct{}
	// drainAsked carries the URL of the first server whose ack asked the
	// client to retire (an operator's drain); capacity 1, later asks are
	// dropped, since one retires the whole process.
	drainAsked chan string
	// refusals counts each tunnel's permanent refusals in a row; gaveUp
	// carries, once, the error to give up with when every tunnel has had
	// enough of them (never with retry_forever). Capacity 1.
	refusals *refusals
	gaveUp   chan error
}

// service is one configured target.
type service struct {
	id        string
	cfg       config.Service
	target    *url.URL
	transport http.RoundTripper
	// healthy is the probe's verdict; the service is announced healthy
	// while it holds and the breaker is not open (announcedHealthy).
	healthy atomic.Bool
	// announced is false while a wait_for_backend service waits for its
	// first passing probe: it is left out of the announcement until then.
	announced atomic.Bool
	// bind holds the Path and TrimBind the forwarded path derives from.
	bind tunnel.Service
	// breaker is the service's circuit breaker; nil when it has none.
	breaker *breaker
	// limiter learns or pins the service's concurrency limit; nil when
	// the service announces no limit.
	limiter *limiter.Limiter
	// inflight counts the service's requests from Forward until their
	// response body is closed.
	inflight atomic.Int64
	// draining is set once a reload removed the service: it is announced
	// draining (and unhealthy) until withdrawn, and still serves what
	// reaches it.
	draining atomic.Bool
	// withdrawn is set once its drain is over: it is left out of the
	// announcement, and serves what reaches it until the state drops it.
	withdrawn atomic.Bool
	// stop ends the service's probe and limiter loops; nil until they
	// start. Set and called under Agent.mu.
	stop context.CancelFunc
}

// serverURLs is server.url then server.urls, each once.
func serverURLs(cfg config.Client) []string {
	var out []string
	for _, u := range append([]string{cfg.ServerURL}, cfg.ServerURLs...) {
		if u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// noteAttempt counts how an attempt of tunnel i ended and, unless
// retry_forever is set, hands Run the error to give up with once every
// server has refused the tunnel for good enough times in a row. It never
// blocks: it runs on the tunnel's goroutine.
func (a *Agent) noteAttempt(i int, err error) {
	giveUp := a.refusals.attempt(i, err)
	if giveUp == nil || a.cfg.RetryForever {
		return
	}
	select {
	case a.gaveUp <- giveUp:
	default:
	}
}

// askDrain records that the server at url asked the client to retire. It
// never blocks: it runs on that tunnel's control loop, once per ack.
func (a *Agent) askDrain(url string) {
	select {
	case a.drainAsked <- url:
	default:
	}
}

// New checks cfg and builds the agent.
func New(cfg config.Client, opts Options) (*Agent, error) {
	if len(cfg.Services) == 0 && len(cfg.Expose) == 0 {
		return nil, errors.New("agent: no services or expose entries configured")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg:          cfg,
		log:          log,
		retiredWait:  cmp.Or(opts.RetiredWait, DefaultRetiredWait),
		instanceID:   newInstanceID(),
		healthChange: make(chan struct{}, 1),
		limitChange:  make(chan struct{}, 1),
		routable:     make(chan struct{}, 1),
		drainAsked:   make(chan string, 1),
		gaveUp:       make(chan error, 1),
		statusSocket: cfg.StatusSocket,
		quit:         make(chan struct{}),
	}
	if opts.StatusSocket != "" {
		a.statusSocket = opts.StatusSocket
	}
	// Resolve on a copy: the caller's Services must not be written.
	cfg.Services = slices.Clone(cfg.Services)
	cfg.ResolveConcurrency()
	a.cfg.Services = cfg.Services
	st := liveState(cfg)
	for i, sc := range cfg.Services {
		svc, err := a.buildService(strconv.Itoa(i), sc)
		if err != nil {
			return nil, err
		}
		st.services = append(st.services, svc)
	}
	a.nextID = len(cfg.Services)
	a.state.Store(st)
	urls := serverURLs(cfg)
	a.refusals = newRefusals(len(urls))
	for i, u := range urls {
		tc, err := tunnel.NewClient(tunnel.ClientConfig{
			URL:          u,
			Token:        cfg.Token,
			Transport:    cfg.Transport,
			Announce:     a.announcement,
			Forwarder:    a,
			RawForwarder: a,
			OnExposed:    func(st []tunnel.ExposeStatus) { a.noteExposed(u, st) },
			Logger:       log,
			OnConnect: func(string) {
				a.markRoutable()
				a.refusals.attempt(i, nil)
				for _, line := range publicURLs(u, a.cfg.Services) {
					a.log.Info("serving", logkey.ServerURL, u, logkey.PublicURL, line)
				}
			},
			OnDisconnect: func(err error) { a.noteAttempt(i, err) },
			OnDrain:      func() { a.askDrain(u) },
			DialContext:  opts.DialServer,
			TLSConfig:    opts.TLSConfig,
		})
		if err != nil {
			return nil, err
		}
		a.tunnels = append(a.tunnels, tc)
	}
	if len(a.tunnels) == 0 {
		return nil, errors.New("agent: no server url configured")
	}
	return a, nil
}

// buildService builds the service id of sc with its breaker and limiter;
// its loops are not started.
func (a *Agent) buildService(id string, sc config.Service) (*service, error) {
	svc, err := newService(id, sc)
	if err != nil {
		return nil, err
	}
	svc.breaker = newBreaker(sc.CircuitBreaker, a.signalHealth)
	if svc.limiter, err = a.newLimiter(svc.id, sc.Concurrency); err != nil {
		return nil, fmt.Errorf("agent: service %s: %w", svc.id, err)
	}
	return svc, nil
}

func newService(id string, sc config.Service) (*service, error) {
	if sc.Serve != "" {
		// The request path is the one of every service; the target is
		// a placeholder the transport never dials.
		svc := &service{id: id, cfg: sc, target: &url.URL{Scheme: "http", Host: "localhost"}, bind: tunnel.Service{Path: sc.Path, TrimBind: sc.TrimBind}}
		svc.transport = staticTransport{h: newStaticFiles(sc)}
		svc.healthy.Store(true)
		svc.announced.Store(true)
		return svc, nil
	}
	u, err := url.Parse(sc.Target)
	if err != nil {
		return nil, fmt.Errorf("agent: service %s target: %w", id, err)
	}
	switch u.Scheme {
	case "http", "https", "h2c", config.TargetUnix:
	default:
		return nil, fmt.Errorf("agent: service %s target %q: scheme must be http, https, h2c or unix", id, sc.Target)
	}
	svc := &service{id: id, cfg: sc, target: u, bind: tunnel.Service{Path: sc.Path, TrimBind: sc.TrimBind}}
	tr, err := backendTransport(sc, u)
	if err != nil {
		return nil, fmt.Errorf("agent: service %s: %w", id, err)
	}
	svc.transport = tr
	// Without a probe a service is healthy once connected; with one it
	// starts unhealthy until the first probe passes (contract §3).
	svc.healthy.Store(!sc.Probed())
	svc.announced.Store(!sc.WaitForBackend || !sc.Probed())
	return svc, nil
}

// announcedHealthy is the health the service is announced with: its
// probe's, unless its circuit breaker is open.
func (svc *service) announcedHealthy() bool {
	return svc.healthy.Load() && !svc.breaker.open()
}

// backendPingAfter is how long an HTTP/2 connection to a backend may stay
// silent before the transport pings it; an unanswered ping closes it
// after half that again. A backend that vanished without closing its
// connections (a frozen container, a dropped route) would otherwise hold
// every stream on it, gRPC streams included, until the visitor gives up.
const backendPingAfter = 30 * time.Second

// newTransport builds the backend transport of one service. Backends are
// local: no proxy from the environment, generous keep-alive pools, no
// compression negotiated on the visitor's behalf. HTTP/2 connections
// (h2 with TLS, h2c) are pinged after pingAfter of silence.
func newTransport(tlsOn, h2c bool, pingAfter time.Duration) *http.Transport {
	t := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   tlsOn,
		// 64 KiB instead of 4 KiB: a streamed body's chunk then reaches
		// the backend in one write rather than three (chunk header, data,
		// CRLF), and large responses are read in fewer calls.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
		// net/http's own HTTP/2 (the x/net/http2 copy bundled in the
		// standard library) does the health pings: no dependency added.
		HTTP2: &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingAfter / 2},
	}
	if h2c {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		t.Protocols = p
	}
	return t
}

func newInstanceID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// markRoutable records, the first time it holds, that the client is
// routable: called as a tunnel comes up, and as a service turns healthy
// while one is up. A client whose services are all unhealthy is not
// routable yet: idle_timeout must not run out while its backend starts.
func (a *Agent) markRoutable() {
	if !slices.ContainsFunc(a.services(), func(s *service) bool { return s.healthy.Load() }) {
		return
	}
	if a.routableSince.CompareAndSwap(0, time.Now().UnixNano()) {
		select {
		case a.routable <- struct{}{}:
		default:
		}
	}
}

// connected reports whether a tunnel is up.
func (a *Agent) connected() bool {
	return slices.ContainsFunc(a.tunnels, (*tunnel.Client).Connected)
}

// announcement is the current state as the server should see it.
func (a *Agent) announcement() tunnel.Announcement {
	st := a.state.Load()
	ann := tunnel.Announcement{
		Name:       a.cfg.Name,
		InstanceID: a.instanceID,
		Draining:   a.draining.Load(),
		Version:    buildinfo.Version(),
		Services:   make([]tunnel.Service, 0, len(st.services)),
	}
	if a.retiring.Load() {
		ann.Retiring, ann.IdleAction = tunnel.RetiringIdle, a.cfg.IdleAction
	}
	for _, svc := range st.services {
		if !svc.announced.Load() || svc.withdrawn.Load() {
			continue // wait_for_backend: not before its first passing probe
		}
		ann.Services = append(ann.Services, svc.announce(st.priority))
	}
	for _, e := range st.expose {
		ann.Expose = append(ann.Expose, announceExpose(e))
	}
	if s := st.scaling; s != nil {
		sc := *s // config.Scaling is tunnel.Scaling: a copy, not the config's own
		ann.Scaling = &sc
	}
	return ann
}

// announceExpose is the expose entry e as the announcement declares it.
func announceExpose(e config.Expose) tunnel.Expose { return e.Expose }

// announce is svc as the announcement declares it (config, the limiter's
// figures, health and draining); top is the client's priority, which a
// service without its own takes.
func (svc *service) announce(top int) tunnel.Service {
	var mc int
	var cc *tunnel.Concurrency
	if svc.limiter != nil {
		snap := svc.limiter.Snapshot()
		mc = snap.Desired
		cc = &tunnel.Concurrency{Mode: string(snap.Mode), Desired: snap.Desired, Min: snap.Min, Max: snap.Max, Fixed: snap.Fixed}
	}
	prio := svc.cfg.Priority
	if prio == 0 {
		prio = top
	}
	draining := svc.draining.Load()
	return tunnel.Service{
		ID:            svc.id,
		Name:          svc.cfg.Name,
		Hostnames:     svc.cfg.Hostnames,
		Path:          svc.cfg.Path,
		MaxConcurrent: mc,
		Priority:      prio,
		// A draining service is announced unhealthy too, so that a
		// server that predates Draining stops routing to it as well.
		Healthy:      svc.announcedHealthy() && !draining,
		Draining:     draining,
		Resilience:   svc.cfg.Resilience,
		TrimBind:     svc.cfg.TrimBind,
		AllowConnect: svc.cfg.AllowConnect,
		Weight:       svc.cfg.Weight,
		LBStrategy:   svc.cfg.LBStrategy,
		Concurrency:  cc,
		Access:       svc.cfg.Access(),
		Headers:      announceHeaders(svc.cfg.Headers),

		TLSPassthrough: svc.cfg.TLSPassthrough,
	}
}

// Forward implements tunnel.Forwarder: it sends req to the service's
// target (see rewrite for the path and Host it gets), through its circuit
// breaker and retry block. A path holding a dot segment is answered 400,
// a request for a tls_passthrough service 421 (never plaintext to its
// TLS port);
// while the breaker is open the backend is not dialed (errBreakerOpen).
func (a *Agent) Forward(ctx context.Context, serviceID string, req *http.Request) (*http.Response, error) {
	svc := a.service(serviceID)
	if svc == nil {
		return nil, fmt.Errorf("agent: unknown service %q", serviceID)
	}
	defer a.lastRequest.Store(time.Now().UnixNano())
	a.served.Add(1)
	svc.inflight.Add(1)
	resp, err := a.forward(ctx, svc, req)
	if err != nil {
		svc.inflight.Add(-1)
		return resp, err
	}
	return svc.countBody(resp), nil
}

// forward is Forward once the service is known.
func (a *Agent) forward(ctx context.Context, svc *service, req *http.Request) (*http.Response, error) {
	if svc.cfg.TLSPassthrough {
		return misdirected(), nil
	}
	if err := svc.rewrite(req); err != nil {
		return badRequest(), nil
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil // keep Go's default User-Agent out
	}
	if !svc.breaker.allow() {
		return nil, errBreakerOpen
	}
	var tk limiter.Ticket
	if svc.limiter != nil {
		tk = svc.limiter.Begin()
	}
	resp, err := svc.send(ctx, req)
	oc := outcome(ctx, resp, err)
	if svc.limiter != nil {
		svc.limiter.End(tk, oc)
	}
	switch {
	case err == nil:
		svc.breaker.done(exchangeOK)
	case oc == limiter.Ignored || ctx.Err() != nil:
		svc.breaker.done(exchangeIgnored)
	default:
		if svc.breaker.done(exchangeFailed) {
			a.log.Warn("circuit breaker open", logkey.Service, svc.id, logkey.Target, svc.cfg.Target, logkey.Err, err)
		}
	}
	if err != nil {
		// The tunnel logs it (rate-limited) and answers the visitor a
		// page that names no address: the target is for the log alone.
		err = fmt.Errorf("target %s: %w", svc.cfg.Target, err)
	}
	return resp, err
}

// outcome classifies one backend exchange for the limiter. A request the
// server abandoned (ctx cancelled) before the backend answered is a
// failure when it gave up at its response timeout (the backend was too
// slow: tunnel.ErrAbandonedTimeout) and says nothing otherwise: the visitor
// left, or the tunnel went away. Any other transport error is a failure: a
// refused or reset connection, a timeout of the backend's own. So are a
// 429 and any 5xx. Everything else, 4xx included, says the backend took
// the request.
func outcome(ctx context.Context, resp *http.Response, err error) limiter.Outcome {
	switch {
	case err != nil && ctx.Err() != nil:
		if cause := context.Cause(ctx); errors.Is(cause, tunnel.ErrAbandonedTimeout) || errors.Is(cause, context.DeadlineExceeded) {
			return limiter.Failure
		}
		return limiter.Ignored
	case err != nil || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return limiter.Failure
	}
	return limiter.Success
}

// service returns the service id of the current state, draining and
// withdrawn ones included; nil when there is none.
func (a *Agent) service(id string) *service {
	// A linear scan over a handful of services beats a map.
	for _, s := range a.state.Load().services {
		if s.id == id {
			return s
		}
	}
	return nil
}

// announceHeaders is the announcement of a service's response header
// rules; nil for none.
func announceHeaders(h *config.HeaderRules) *tunnel.HeaderRules {
	if h == nil {
		return nil
	}
	return &tunnel.HeaderRules{Set: h.Set, Add: h.Add, Remove: h.Remove}
}
