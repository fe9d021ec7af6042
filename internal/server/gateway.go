// Package gateway owns aperio-server's public port: one listener that
// serves visitors, accepts tunnels and answers the /aperio endpoints, over
// HTTP/1.1 and HTTP/2 (h2c in plain text, h2 with TLS), and the order in
// which all of it shuts down.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/dashboard"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/debughttp"
	"github.com/aperio-dev/aperio/internal/edge/acme"
	"github.com/aperio-dev/aperio/internal/edge/listen"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/ports"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// Options are the parts of a Gateway that are not configuration.
type Options struct {
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Store, when set, is used instead of opening the one the
	// configuration names; its caller closes it.
	Store *store.DB
	// AccessLog receives the access log (one line per proxied request,
	// when access_log is on); nil means Logger. main gives it a handler of
	// its own, so that log_level does not silence it.
	AccessLog *slog.Logger
	// TracerProvider, when set, turns tracing on: spans of every proxied
	// request and scaling hook call. Nil means tracing is off. Its creator
	// shuts it down.
	TracerProvider trace.TracerProvider
	// Ready, when set, is called once by Serve when the server is ready
	// for visitors: the store open, the public listener (and the metrics
	// and ACME HTTP listeners) bound, just before it accepts. main tells
	// systemd (internal/sdnotify).
	Ready func(addr net.Addr)
}

// Gateway is a running aperio-server. Create it with New, run it with
// Serve or ListenAndServe.
type Gateway struct {
	// ports are the public TCP and UDP ports of expose entries
	// (tcp_port_range); refusing every entry when the range is empty.
	ports    *ports.Manager
	cfg      Config
	log      *slog.Logger
	router   *router.Router
	registry *router.Registry // router's: its clients, pools and route table
	tunnels  *tunnel.Server
	// sessions is the tunnel server's registry: the router's registry,
	// then the session hooks in their declared order (sessionHooks).
	sessions sessionChain
	srv      *http.Server
	started  time.Time

	metrics *telemetry.Metrics
	stats   *telemetry.Stats // the admin API's figures per hostname
	// hub is the admin API's live stream; Serve closes it first at
	// shutdown, so that no follower holds the server's Shutdown.
	hub    *telemetry.Hub
	calls  *callCounts  // scaling hook calls by reason and outcome
	tracer trace.Tracer // nil when tracing is off
	proxy  http.Handler // the router, observed: visitors' requests
	// access is visitor access control's server side: signing keys,
	// share links, the OIDC provider and its revocations.
	access *visitorAccess
	// events is the emit path of the gateway's own events (client
	// connections and refusals, auth_denied, token_expiring,
	// config_reloaded): each audited, then handed to hooks. Its queue
	// takes those of the request and handshake paths off them.
	events *events.Emitter
	api    http.Handler  // the admin API under /aperio/api
	admin  *admin.API    // the admin API itself: its login routes
	ui     *dashboard.UI // the dashboard under /aperio/, a client of api
	db     *store.DB
	// usage counts visitor bytes per token, organization and bind and
	// enforces the byte quotas.
	usage *metering
	// scaler is the autoscaler; nil unless scaling is on.
	scaler *autoscaling
	// fence is the outbound policy of every call the server makes to a
	// URL someone else chose: scaling hooks and webhooks alike.
	fence *outbound.Client
	// hooks delivers the controller's events and the admin API's
	// maintenance changes to webhooks.
	hooks    *webhook.Dispatcher
	ownStore bool // New opened db, so Serve closes it
	// defaultOrg is the ID of the "default" organization: the master
	// token's clients belong to it (see router.Ownership).
	defaultOrg string
	// mirror keeps the router's and the ports' copies of the store's
	// ownership and maintenance in step with it.
	mirror storeMirror
	// tokens keeps the sessions true to their tokens: revocations,
	// edits, rotations, expiry and its warnings.
	tokens tokenSessions
	// metricsHandler serves /aperio/metrics on every hostname (404 unless
	// metrics_token is set, and when metrics_listen moves it elsewhere).
	metricsHandler http.Handler
	// edge is the visitor's identity and the refusals before any
	// handler; Reload replaces it (denied_ips, admin_allowed_ips).
	edge        atomic.Pointer[edge]
	metricsAddr atomic.Value // string: the metrics listener's address, once listening
	debugAddr   atomic.Value // string: the debug listener's address, once listening
	// cert is the public port's certificate, read by every handshake;
	// nil without tls_cert. Reload replaces it.
	cert atomic.Pointer[tls.Certificate]
	// acme obtains and serves certificates when acme: is enabled; nil
	// otherwise (then cert, from tls_cert, is served if set).
	acme *acme.Manager
	// acmeAsk is automatic TLS's ask check, fed by the registry chain;
	// nil when acme is off.
	acmeAsk *acmeAsk
	// current is the configuration in effect: cfg with what Reload
	// applied. cfg stays the one New was given.
	current    atomic.Pointer[Config]
	reloadMu   sync.Mutex   // serializes Reload
	reloads    atomic.Int64 // reloads applied
	reloadedAt atomic.Int64 // unix nanoseconds of the last reload applied; 0: none

	stopping atomic.Bool    // readyz answers 503 once set
	ready    func(net.Addr) // Options.Ready
}

// New validates cfg, opens the store (migrating it) unless opts has one,
// and assembles the server, passing each package's settings through. Serve
// runs it and closes what New opened.
func New(ctx context.Context, cfg Config, opts Options) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, log: log, started: time.Now(), db: opts.Store}
	if g.db == nil {
		sc := cfg.Store
		sc.Logger = log
		db, err := store.Open(ctx, sc)
		if err != nil {
			return nil, err
		}
		g.db, g.ownStore = db, true
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		if g.scaler != nil {
			// Its owner goroutine runs from New on; Serve's Run would
			// have ended it.
			g.scaler.ctl.Close()
		}
		if g.ownStore {
			g.db.Close()
		}
	}()
	org, err := g.db.EnsureOrg(ctx, "default")
	if err != nil {
		return nil, fmt.Errorf("gateway: default organization: %w", err)
	}
	g.fence, err = outbound.New(cfg.Outbound)
	if err != nil {
		return nil, fmt.Errorf("gateway: outbound policy: %w", err)
	}
	// Webhooks carry the autoscaler's events and the admin API's
	// maintenance changes, through the same fence as scaling hooks; each
	// attempt lands in the store's delivery log.
	g.hooks, err = webhook.New(webhook.Config{Subscriptions: g.db, Client: g.fence, Deliveries: g.db, Logger: log})
	if err != nil {
		return nil, err
	}
	g.events = events.New(events.Config{Audit: g.db, Sink: g.hooks, Logger: log})
	var serveStale *stale.Cache
	if cfg.CacheEnabled {
		cc := cfg.Cache
		cc.Now = time.Now
		var err error
		if serveStale, err = stale.New(cc); err != nil {
			return nil, err
		}
	}
	if opts.TracerProvider != nil {
		g.tracer = opts.TracerProvider.Tracer(telemetry.TracerName)
	}
	g.ready = opts.Ready
	if g.metrics, err = telemetry.NewMetrics(); err != nil {
		return nil, err
	}
	g.calls = new(callCounts)
	g.stats = telemetry.NewStats(telemetry.StatsConfig{})
	if g.hub, err = telemetry.NewHub(telemetry.HubConfig{MaxSubscribers: cfg.MaxStreamSubscribers, Meter: g.metrics.Meter()}); err != nil {
		return nil, err
	}
	var scaler router.Scaler
	if cfg.ScalingEnabled {
		scaler = lazyScaler{g}
	}
	rc := cfg.Router
	rc.Scaler, rc.Cache, rc.Logger, rc.Tracer = scaler, serveStale, log, g.tracer
	if rc.Inspector, err = inspect.New(cfg.Inspect); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.usage, err = newMetering(cfg, g.db, g.events, log); err != nil {
		return nil, err
	}
	rc.Usage = g.usage.meter
	rc.DownThreshold = cfg.Tunnel.DownThreshold
	rc.CatchAll = !cfg.RequireHostnameBind
	if g.access, err = newVisitorAccess(ctx, cfg, g.db, g.fence, g.events, log); err != nil {
		return nil, err
	}
	if rc.Access, err = g.access.routerConfig(cfg, g.fence); err != nil {
		return nil, err
	}
	rt, err := router.New(rc)
	if err != nil {
		return nil, err
	}
	g.router = rt
	g.registry = rt.Registry()
	g.access.registry = g.registry
	// Ownership first: armed scaling records are judged by it.
	g.defaultOrg = org.ID
	g.mirror = storeMirror{db: g.db, registry: g.registry, defaultOrg: org.ID, log: log}
	if err := g.mirror.loadOwnership(ctx); err != nil {
		return nil, err
	}
	var scaling *scalingHook
	if cfg.ScalingEnabled {
		g.scaler, err = newAutoscaling(cfg, scalingWiring{db: g.db, reg: g.registry, events: g.events, hooks: g.hooks, hub: g.hub,
			stats: g.stats, fence: g.fence, calls: g.calls, tracer: g.tracer, defaultOrg: org.ID, log: log})
		if err != nil {
			return nil, err
		}
		g.mirror.armed = g.scaler.armed
		scaling = g.scaler.hook
		if err := g.scaler.armed.reload(ctx); err != nil {
			return nil, fmt.Errorf("gateway: scaling records: %w", err)
		}
	}
	if cfg.Tunnel.MaxStreams <= cfg.Router.MaxConcurrentRequests {
		log.Warn("tunnel_max_streams is not above max_concurrent_requests: one client cannot carry every request the server admits", logkey.TunnelMaxStreams, cfg.Tunnel.MaxStreams, logkey.MaxConcurrentRequests, cfg.Router.MaxConcurrentRequests)
	}
	tc := cfg.Tunnel
	tc.Auth = &tokenAuth{master: []byte(cfg.Token), db: g.db, defaultOrg: org.ID, now: time.Now, limits: g.usage.limits}
	admission := newAdmissionHook(g.db, log)
	admission.limits = g.usage.limits
	if g.ports, err = newPorts(cfg, g.usage.meter, g.events, log); err != nil {
		return nil, err
	}
	g.mirror.ports = g.ports
	if err := g.mirror.loadPortOwnership(ctx); err != nil {
		return nil, err
	}
	if cfg.ACME.Enabled() {
		// Automatic TLS follows which names are bound (acme.go).
		g.acmeAsk = newACMEAsk(g.db, g.events, g.registry, cfg.ACME.OnDemandGrace)
	}
	g.sessions = sessionChain{router: g.registry, hooks: sessionHooks(scaling, admission, g.ports, g.acmeAsk,
		auditHook{events: g.events, log: log, budget: events.NewRefusalBudget(time.Now),
			binds: newBindAudits(g.registry, time.Now), retired: newRetirements(g.registry, g.hub)},
		streamHook{hub: g.hub})}
	tc.Registry = g.sessions
	tc.Logger = log
	ts, err := tunnel.NewServer(tc)
	if err != nil {
		return nil, err
	}
	g.tunnels = ts
	g.tokens = tokenSessions{db: g.db, tunnels: ts, events: g.events, log: log}
	if err := g.registerMetrics(); err != nil {
		return nil, err
	}
	if err := registerPortMetrics(g.metrics.Meter(), g.ports); err != nil {
		return nil, err
	}
	obs := telemetry.ObserverConfig{Meter: g.metrics.Meter(), AccessLogIPs: cfg.AccessLogIPs, ServerTiming: cfg.ServerTiming, Tracer: g.tracer,
		Stats: g.stats, Hub: g.hub}
	if cfg.AccessLog {
		obs.AccessLog = opts.AccessLog
		if obs.AccessLog == nil {
			obs.AccessLog = log
		}
	}
	observer, err := telemetry.NewObserver(obs)
	if err != nil {
		return nil, err
	}
	g.proxy = observer.Wrap(g.router)
	g.metricsHandler = g.metrics.Handler(cfg.MetricsToken)
	if cfg.MetricsListen != "" {
		g.metricsHandler = http.NotFoundHandler()
	}
	e, err := newEdge(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	e.settings = rt.Snapshot()
	g.edge.Store(e)
	g.current.Store(&cfg)
	if cfg.TLSCert != "" {
		cert, err := loadCertificate(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, err
		}
		g.cert.Store(cert)
	}
	adminLogin, err := g.access.adminLogin(cfg, g.metrics.Meter())
	if err != nil {
		return nil, err
	}
	tcpRange, err := portspec.ParseList(cfg.TCPPortRange)
	if err != nil {
		return nil, fmt.Errorf("gateway: tcp_port_range: %w", err)
	}
	clients := clientControl{tunnels: g.tunnels, registry: g.registry}
	api, err := admin.New(admin.Config{MasterToken: cfg.Token, Store: g.db, Clients: clients, Ports: gatewayPorts{g}, TCPPortRange: tcpRange, Disabler: clients, Drainer: clients, Scaling: g.scaler.admin(), Outbound: g.fence, Explainer: rt, Shares: shareMinter{g.access.keys}, OIDC: adminLogin, Events: g.hooks, Subscriptions: g.hooks, Revocations: g.access, Webhooks: g.hooks, Logger: log,
		Inspector: rc.Inspector, Replay: g.proxy,
		Traffic: trafficView{stats: g.stats, reg: g.registry}, Stream: g.hub})
	if err != nil {
		return nil, err
	}
	g.api, g.admin = api.Handler(), api
	if g.ui, err = dashboard.New(dashboard.Config{API: g.api, Login: api.LoginHandler(), HasSession: hasAdminSession, OIDC: adminLogin != nil, Logger: log}); err != nil {
		return nil, err
	}
	if err := g.mirror.loadMaintenance(ctx); err != nil {
		return nil, err
	}
	g.mirror.warnUnowned(ctx)
	g.mirror.warnPortless(ctx)
	if g.acme, err = newACME(cfg, g.db, g.acmeAsk, log); err != nil {
		return nil, err
	}
	if err := registerACMEMetrics(g.metrics.Meter(), g.acme); err != nil {
		return nil, err
	}
	tlsConfig := listen.TLSConfig(g.getCertificate)
	if g.acme != nil {
		tlsConfig = g.acme.TLSConfig(listen.TLSConfig(nil))
	}
	tlsConfig = passthrough{router: rt, registry: g.registry, edge: &g.edge, idle: cfg.Router.VisitorIdleTimeout, log: log}.wrap(tlsConfig)
	g.srv = &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.KeepAliveTimeout,
		MaxHeaderBytes:    int(cfg.MaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		TLSConfig:         tlsConfig,
		ConnContext:       listen.FramingContext,
	}
	if !g.servesTLS() {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		g.srv.Protocols = p
	}
	ok = true
	return g, nil
}

// Handler returns the handler of the public port.
func (g *Gateway) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if listen.RefuseSmuggled(w, r) {
			return
		}
		edge := g.edge.Load() // one for the whole request
		r, ok := edge.admit(w, r)
		if !ok {
			return
		}
		p := r.URL.Path
		if !router.Reserved(p) {
			g.proxy.ServeHTTP(w, r)
			return
		}
		adminHost := edge.adminHosts.allows(r.Host)
		if p == oidc.CallbackPath && adminHost && g.admin.LoginCallback(r) {
			// The end of an admin login: the operators' like the rest
			// of the admin API, and a call to the provider.
			if !edge.guardAdmin(w, r) && g.router.Charge(w, r) {
				g.admin.ServeLoginCallback(w, r)
			}
			return
		}
		if strings.HasPrefix(p, oidc.AuthPrefix) {
			// The login of a protected hostname: on that hostname, no
			// admin credential.
			g.access.serveAuth(w, r)
			return
		}
		if p == access.JWKSPath {
			// Public on every hostname: backends verify identity tokens
			// with it.
			g.access.serveJWKS(w, r)
			return
		}
		if !adminHost && adminPath(p) {
			refuseAdminHost(w, r)
			return
		}
		if edge.guardAdmin(w, r) || charged(r) && !g.router.Charge(w, r) {
			return
		}
		if p == metricsPath {
			g.metricsHandler.ServeHTTP(w, r)
			return
		}
		if p == admin.Prefix || strings.HasPrefix(p, admin.Prefix+"/") {
			g.api.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(p, adminLoginPrefix) {
			g.admin.LoginHandler().ServeHTTP(w, r)
			return
		}
		if dashboard.Owns(p) {
			g.ui.ServeHTTP(w, r)
			return
		}
		switch p {
		case tunnel.Path:
			g.tunnels.ServeHTTP(w, r)
		case "/aperio/health":
			g.health(w, r)
		case "/aperio/healthz":
			w.WriteHeader(http.StatusOK)
		case "/aperio/readyz":
			if g.stopping.Load() {
				http.Error(w, "shutting down", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + p})
		}
	})
}

func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"status":             "healthy",
		"version":            buildinfo.Version(),
		"connected_clients":  g.tunnels.RoutedSessions(), // as GET /clients counts them
		"uptime_seconds":     int64(time.Since(g.started).Seconds()),
		"config_reloads":     g.reloads.Load(),
		"config_reloaded_at": reloadedAt(g.reloadedAt.Load()),
	})
}

// reloadedAt is the time of the last reload for /aperio/health: RFC 3339,
// or nil when there was none.
func reloadedAt(ns int64) any {
	if ns == 0 {
		return nil
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ListenAndServe listens on host:port and serves until ctx ends.
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	addr := net.JoinHostPort(g.cfg.Host, strconv.Itoa(g.cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", addr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully: readyz
// turns 503, the listener closes, in-flight visitor requests finish (up to
// shutdown_timeout), and the tunnels close last so those requests can
// complete through them. It returns nil after a clean shutdown.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	g.log.Info("server listening", logkey.Addr, ln.Addr().String(), logkey.TLS, g.servesTLS(), logkey.Version, buildinfo.Version(), logkey.Store, g.db.Backend())
	g.log.Info("limits in effect (docs/limits.md)", logkey.Limits, limitsInEffect(g.cfg))
	// The background loops run for the server's lifetime in one group: a
	// loop's error is logged (it stops that loop, not the server), and
	// the deferred teardown waits for every loop before the store closes.
	wctx, stopWatch := context.WithCancel(context.Background())
	var loops errgroup.Group
	loop := func(stopped string, run func(context.Context) error) {
		loops.Go(func() error {
			if err := run(wctx); err != nil {
				g.log.Error(stopped, logkey.Err, err)
			}
			return nil
		})
	}
	forever := func(run func(context.Context)) func(context.Context) error {
		return func(ctx context.Context) error { run(ctx); return nil }
	}
	// Subscribed here, not in the loop's goroutine, so that the watcher's
	// first re-read (changes.go) follows a subscription already in place.
	changes := g.db.Subscribe(wctx)
	loop("", forever(func(ctx context.Context) { g.watchChanges(ctx, changes) }))
	if g.scaler != nil {
		loop("autoscaling stopped", g.scaler.ctl.Run)
	}
	// Webhook deliveries run for the server's lifetime; those still
	// queued or retrying at shutdown are abandoned.
	if g.hooks != nil {
		loop("webhook delivery stopped", g.hooks.Run)
	}
	// The events queued off the request and handshake paths are written
	// for the server's lifetime; those still queued at shutdown are
	// abandoned.
	loop("event queue stopped", g.events.Run)
	loop("", forever(g.tokens.warnLoop))
	// Rotations made by other servers reach this one through the change
	// feed, and at least every signing.DefaultRefresh.
	if g.acme != nil {
		loop("", forever(g.acme.Run))
	}
	loop("", forever(g.access.keys.Run))
	// Usage is flushed for the server's lifetime and once more after the
	// visitors' requests finished (stopWatch runs after Shutdown), before
	// the store closes.
	loop("", forever(g.usage.run))
	defer func() {
		stopWatch()
		loops.Wait()
		g.ports.Close()
		if g.ownStore {
			g.db.Close()
		}
	}()
	// The connection cap, PROXY protocol, and the framing guard (plain)
	// or the ClientHello record for TLS passthrough by SNI (TLS,
	// passthrough.go). trusted_proxies and proxy_protocol need a restart:
	// Reload keeps them, so the first edge's are every edge's.
	first := g.edge.Load()
	ln = listen.Chain(ln, listen.Config{
		MaxPerIP:      g.cfg.MaxConnectionsPerIP,
		Trusted:       first.resolve.Trusts,
		ProxyProtocol: g.cfg.ProxyProtocol,
		Framing:       !g.servesTLS(),
		Hello:         g.servesTLS(),
	})
	// The debug listener (debug_listen: pprof and runtime metrics on a
	// loopback address, nothing of it on the public port) closes last.
	if g.cfg.DebugListen != "" {
		d, derr := debughttp.Listen(g.cfg.DebugListen, g.log)
		if derr != nil {
			return fmt.Errorf("gateway: %w", derr)
		}
		g.debugAddr.Store(d.Addr().String())
		defer d.Close()
	}
	stopMetrics, merr := g.serveMetrics()
	if merr != nil {
		return merr
	}
	defer stopMetrics()
	stopACME, aerr := serveACMEHTTP(g.cfg, g.acme, g.log)
	if aerr != nil {
		return aerr
	}
	defer stopACME()
	if g.ready != nil {
		// The socket is bound and listening: a connection made from now
		// waits in its backlog for the Serve below.
		g.ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() {
		var err error
		if g.servesTLS() {
			// The certificate comes from the TLS config's GetCertificate:
			// the ACME manager's, or getCertificate (New loaded it,
			// Reload replaces it).
			err = g.srv.ServeTLS(ln, "", "")
		} else {
			err = g.srv.Serve(ln)
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	g.stopping.Store(true)
	// Stream followers never finish by themselves: ended now, they do
	// not hold Shutdown, which waits for every active request.
	g.hub.Close()
	timeout := g.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = DefaultConfig().ShutdownTimeout
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g.log.Info("shutting down", logkey.Timeout, timeout)
	err := g.srv.Shutdown(sctx)
	if err != nil {
		g.log.Warn("shutdown timeout reached; closing remaining connections")
		g.srv.Close()
	}
	if terr := g.tunnels.Shutdown(sctx); terr != nil {
		g.log.Warn("tunnels did not close in time", logkey.Err, terr)
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve: %w", serr)
	}
	g.log.Info("server stopped")
	return nil
}

// servesTLS reports whether the public port speaks TLS: with tls_cert or
// with automatic TLS.
// sessionHooks is the order in which the features take part in a tunnel
// session's life, after the router (see sessionHook): the one place it is
// declared. scaling and ask are nil when autoscaling or automatic TLS is
// off.
//
//   - scaling: declarations of the binds the router accepted (it reads
//     the router's binds of the announcement, so it comes right after it);
//   - admission: client_allowed_ips, max_connections, max_clients, checked
//     before the router sees a session and released after it left;
//   - ports: the session's expose entries, applied after its binds,
//     released before the router forgets it;
//   - acme: the names the ask check allows, learnt after the binds and
//     forgotten before the router forgets them;
//   - audit: client_connected, client_refused (for a refusal by any step
//     above), refused binds, instance_retired, client_disconnected, once
//     every step above is done;
//   - stream: the live stream's client events, last, so that a follower
//     never sees a session the audit log has not.
func sessionHooks(scaling *scalingHook, admission *admissionHook, pm *ports.Manager, ask *acmeAsk, audit auditHook, stream streamHook) []sessionHook {
	var hooks []sessionHook
	if scaling != nil {
		hooks = append(hooks, scaling.hook())
	}
	hooks = append(hooks, admission.hook(), portsHook(pm))
	if ask != nil {
		hooks = append(hooks, acmeHook(ask))
	}
	return append(hooks, audit.hook(), stream.hook())
}

func (g *Gateway) servesTLS() bool { return g.cfg.TLSCert != "" || g.acme != nil }
