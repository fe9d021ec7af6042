package router

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
)

// Config configures a Router. The zero value routes with round-robin, no
// limits and no waiting; DefaultConfig holds the server's defaults.
type Config struct {
	// MaxBodyBytes bounds a request body (max_body_size); larger bodies get
	// 413. Zero means no bound.
	MaxBodyBytes int64
	// GatewayTimeout is how long a request may wait for a client or for a
	// client's permit (gateway_timeout). Zero means no waiting.
	GatewayTimeout time.Duration
	// DownThreshold is how long after its last client left a hostname
	// still waits for one to return instead of answering 502 at once
	// (client_down_threshold).
	DownThreshold time.Duration
	// Strategy is lb_strategy: "round-robin" (default), "least-inflight",
	// "primary-standby" or "sticky". A client service may announce its
	// own for its binds.
	Strategy string
	// AffinityKey signs the aperio_affinity cookies of lb_strategy sticky.
	// Nil means a random key per Router: cookies stop matching when the
	// server restarts, and visitors are balanced anew (and re-issued one).
	AffinityKey []byte
	// OutlierConsecutive5xx is how many 5xx answers in a row take a client
	// service out of rotation (outlier_consecutive_5xx); zero turns
	// ejection off. OutlierEjectionTime is how long the first ejection
	// lasts (outlier_ejection_time), doubling with each ejection in a row
	// up to ten times; OutlierMaxEjectedPercent bounds the share of a
	// pool's members ejected at once (outlier_max_ejected_percent, 0..100).
	OutlierConsecutive5xx    int
	OutlierEjectionTime      time.Duration
	OutlierMaxEjectedPercent int
	// MaxConcurrentRequests bounds proxied requests in flight across the
	// server (max_concurrent_requests). Zero means unbounded.
	MaxConcurrentRequests int
	// MaxStreamsPerIP bounds the proxied requests in flight of one
	// visitor address (max_streams_per_ip, the real client address behind
	// trusted proxies); beyond it: 429 streams-per-ip with Retry-After: 1.
	// Zero means no bound. Default 256.
	MaxStreamsPerIP int
	// MaxWSConnections bounds the WebSocket (and other upgraded)
	// relays open at once (max_ws_connections), counted from the upgrade
	// request until the relay ends; beyond it: 503 with Retry-After.
	// Zero means no bound. Default 10000.
	MaxWSConnections int
	// IPLimitMax and IPLimitRefill are the per-visitor token bucket
	// (ip_limit_max burst, ip_limit_refill tokens per second). A zero
	// IPLimitMax disables it.
	IPLimitMax    int
	IPLimitRefill float64
	// UnderscoreHeaders is underscore_headers: what becomes of a visitor's
	// header whose name holds an underscore: "allow" (the default, "" too)
	// passes it on, "drop" removes it, "refuse" answers the request 400.
	// Whatever it says, a name that is one of the server's own once "_" is
	// read as "-" (X_Aperio_User, X_Forwarded_For: see serverOwnedHeader)
	// is always removed. Applied by Reconfigure.
	UnderscoreHeaders string
	// Failover is "fail" (default), "retry", "wait" or "retry-wait";
	// FailoverAllMethods lifts the idempotent-methods rule; FailoverMaxJumps
	// and FailoverWindow bound re-dispatch.
	Failover           string
	FailoverAllMethods bool
	FailoverMaxJumps   int
	FailoverWindow     time.Duration
	// FailoverReplayMaxBody (failover_replay_max_body, bytes) is the
	// largest request body kept so that failover may send it again, and
	// also the bound on the bytes kept across all requests at once; a body
	// beyond either streams and cannot fail over. Zero keeps none.
	FailoverReplayMaxBody int64
	// RetryOn5xx lists statuses (500..599, at most 16) on which an
	// idempotent request is sent once more, to another client
	// (retry_on_5xx). Empty means never.
	RetryOn5xx []int
	// Fallbacks are the redirects visitors get when no client can serve
	// their hostname (fallbacks); at most one per hostname pattern, see
	// Fallback.
	Fallbacks []Fallback
	// ErrorPages are the operator's HTML pages (error_pages); nil means
	// the built-in page for every status and hostname. See ErrorPage.
	ErrorPages []ErrorPage
	// MaintenanceWindows are the recurring maintenance windows
	// (maintenance_windows), applied beside the entries of SetMaintenance.
	MaintenanceWindows []MaintenanceWindow
	// Now is the clock of maintenance (entries' ends, windows); nil means
	// time.Now. Tests inject one.
	Now func() time.Time
	// Scaler, when set, starts instances for armed binds (cold start).
	Scaler Scaler
	// MaxHeld bounds the requests held for one bind's cold start
	// (scaling_max_held); beyond it the answer is 503 with Retry-After.
	// Zero means the wait queue's own bound.
	MaxHeld int
	// Cache, when set, keeps the last good GET responses of services that
	// announce resilience and serves them stale when nothing can serve.
	Cache *stale.Cache
	// VisitorIdleTimeout ends a request whose visitor makes no progress
	// reading its response or sending its body for this long
	// (visitor_idle_timeout); VisitorMinRate, in bytes per second, ends
	// one slower than that once it waited VisitorIdleTimeout on the
	// visitor in total (visitor_min_bytes_per_second). Zero turns each
	// off. See deadline.go.
	VisitorIdleTimeout time.Duration
	VisitorMinRate     int64
	// Logger receives routing diagnostics; nil discards them.
	Logger *slog.Logger
	// Tracer, when set, records each request's route selection, queue
	// wait, cold-start hold and dispatch as spans under the span in the
	// request's context, and sends the dispatch span's traceparent to the
	// backend. Nil means tracing is off: no span, no clock read for one.
	Tracer trace.Tracer

	// Policy is the traffic policy (routes, rate_limits, headers,
	// security_headers), compiled by New. The zero value is none.
	Policy policy.Config
	// CatchAll lets services that name no hostname serve the hostnames no
	// other bind matches, for the master token and tokens minted with
	// allow_catch_all (require_hostname_bind false). False, the zero
	// value, refuses such services, unless their token lists exact
	// hostnames (auto-bind).
	CatchAll bool

	// Access is the server's side of visitor access control
	// (default_access, the identity signer, share links, the outbound
	// client of jwt and forward).
	Access AccessConfig

	// Inspector, when set, holds the request inspector's captures: the
	// requests of a hostname it captures are recorded on their way
	// (docs/inspector.md). Nil captures nothing.
	Inspector *inspect.Inspector
	// Usage counts each dispatched request's visitor bytes against its
	// client's token, organization and bind hostname, and refuses a
	// request whose token or organization is over its byte quota (429
	// token-quota or org-quota). Nil counts nothing.
	Usage *usage.Meter
}

// Router routes visitor requests to connected clients: it implements
// http.Handler for visitors, running each request through the admission
// stages and dispatch. Which clients there are, their pools and the route
// table are its Registry's, which it reads without a lock. It is safe for
// concurrent use.
type Router struct {
	cfg      Config
	log      *slog.Logger
	reg      *Registry // the clients, pools and route table requests are routed by
	strategy strategy
	failover failoverPolicy
	limits   *admissionLimits // max_concurrent_requests, max_streams_per_ip, max_ws_connections, the 429 counts
	held     atomic.Int64     // requests held for a cold start
	tracer   trace.Tracer     // nil when tracing is off
	// cur is the configuration Reconfigure replaces (limits, policy,
	// pages, windows, fallbacks, default_access); never nil after New.
	cur atomic.Pointer[settings]

	now func() time.Time // cfg.Now, or time.Now

	replayKept atomic.Int64 // request body bytes kept for replay
	outliers   *outliers    // passive outlier ejection
}

// New returns a Router with no clients, or an error naming a bad setting.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt := &Router{
		cfg:      cfg,
		log:      log,
		tracer:   cfg.Tracer,
		limits:   newAdmissionLimits(cfg),
		outliers: newOutliers(cfg, log),
	}
	switch cfg.Strategy {
	case "", "round-robin":
		rt.strategy = roundRobin
	case "least-inflight":
		rt.strategy = leastInflight
	case "primary-standby":
		rt.strategy = primaryStandby
	case "sticky":
		rt.strategy = sticky
	default:
		return nil, fmt.Errorf("router: unknown lb_strategy %q", cfg.Strategy)
	}
	fp, err := parseFailover(cfg.Failover)
	if err != nil {
		return nil, err
	}
	rt.failover = fp
	set, err := rt.buildSettings(cfg, nil)
	if err != nil {
		return nil, err
	}
	rt.cur.Store(set)
	rt.reg = newRegistry(cfg, rt.strategy, log)
	rt.now = cfg.Now
	if rt.now == nil {
		rt.now = time.Now
	}
	return rt, nil
}

// Registry returns the router's registry: the tunnel server's
// tunnel.Registry, and the clients, pools and route table the router
// reads. It is the same for the router's life.
func (rt *Router) Registry() *Registry { return rt.reg }
