package router

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aperio-dev/aperio/internal/visitor/access"
	"github.com/aperio-dev/aperio/internal/visitor/policy"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/tunnel"
)

// pipelineCase is one request through the stages: a router in some state,
// and the request a visitor sends to it.
type pipelineCase struct {
	name  string
	setup func(t *testing.T) *Router
	// method is the request's method (empty: GET); path its target
	// (empty: "/"); host its :authority (empty: app.test); hostField an
	// HTTP/2 host field, if any.
	method, host, path, hostField string
	// want is the status the visitor gets, which Explain must predict.
	want int
	// notProxied marks a path aperio-server answers itself: Explain says
	// so (status 0), and the router, reached anyway, refuses it with want.
	notProxied bool
	// setting is the setting Explain must name as deciding the verdict.
	setting string
	// header holds request headers (credentials), given to both.
	header http.Header
}

// serving returns a setup: a router with cfg and one client "a" announcing
// a.
func serving(cfg Config, a *tunnel.Announcement) func(t *testing.T) *Router {
	return func(t *testing.T) *Router {
		rt := newRouter(t, cfg)
		rt.reg.update(newConn("a", 1), a)
		return rt
	}
}

// predictedStatus is the status Explain says the visitor gets: its status
// when it decides at once; the backend's 200 (every fake answers 200) for
// a dispatch or a stale copy; else the status it says follows the wait.
func predictedStatus(ex Explanation) int {
	switch {
	case ex.Status != 0:
		return ex.Status
	case strings.HasPrefix(ex.Verdict, "dispatch to client"):
		return http.StatusOK
	case strings.HasPrefix(ex.AfterWait, "stale copy"):
		return http.StatusOK
	case ex.AfterWait != "":
		n, err := strconv.Atoi(strings.Fields(ex.AfterWait)[0])
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// TestExplainAgreesWithProxy runs each case through Explain, then through
// the proxy, on the same router, and fails when the status Explain
// predicts differs from the status served. The cases cover every refusal
// kind Explain can see and every verdict: decided at once, dispatched, or
// decided after a queue wait or a cold-start hold (the bubble's clock runs
// those waits out).
func TestExplainAgreesWithProxy(t *testing.T) {
	withStale := func(t *testing.T) *Router {
		c, err := stale.New(stale.Config{MaxBytes: 1 << 20, MaxStale: time.Hour, Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		rt := newRouter(t, Config{Cache: c, DownThreshold: time.Minute, GatewayTimeout: time.Second})
		conn := newConn("a", 1)
		a := ann(svc("", "app.test"))
		a.Services[0].Resilience = true
		rt.reg.update(conn, a)
		if code := serveOnce(t, rt, "GET", "app.test", "/page", ""); code != http.StatusOK {
			t.Fatalf("GET /page while up = %d, want 200", code)
		}
		rt.reg.detach(conn)
		return rt
	}
	tests := []pipelineCase{
		{
			name:  "reserved path",
			setup: func(t *testing.T) *Router { return newRouter(t, Config{}) },
			path:  "/aperio/health", want: http.StatusBadRequest, notProxied: true,
		},
		{
			name:  "path climbing above root",
			setup: serving(Config{}, ann(svc("/api", "app.test"))),
			path:  "/api/%2e%2e/%2e%2e/etc", want: http.StatusBadRequest,
		},
		{
			name:  "dot segments leave the bind",
			setup: serving(Config{}, ann(svc("/api", "app.test"))),
			path:  "/api/%2e%2e/admin", want: http.StatusBadGateway,
		},
		{
			name: "ip limit", setting: "ip_limit_max",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{IPLimitMax: 1, IPLimitRefill: 0.001})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				rt.cur.Load().ips.allow(visitor, time.Now()) // the visitor spent its one token
				return rt
			},
			want: http.StatusTooManyRequests,
		},
		{
			name: "maintenance",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				rt.reg.SetMaintenance([]Maintenance{{Hostname: "app.test"}})
				return rt
			},
			want: http.StatusServiceUnavailable,
		},
		{
			name:      "host field conflicts with :authority",
			setup:     serving(Config{}, ann(svc("", "app.test"))),
			hostField: "other.test", want: http.StatusBadRequest,
		},
		{
			name:      "host field same as :authority",
			setup:     serving(Config{}, ann(svc("", "app.test"))),
			hostField: "app.test", want: http.StatusOK,
		},
		{
			name:  "unknown host",
			setup: serving(Config{}, ann(svc("", "app.test"))),
			host:  "nope.test", want: http.StatusBadGateway,
		},
		{
			name: "fallback redirect",
			setup: func(t *testing.T) *Router {
				return newRouter(t, Config{Fallbacks: []Fallback{{Hostname: "gone.test", URL: "https://status.example.com/"}}})
			},
			host: "gone.test", want: http.StatusFound,
		},
		{
			// The proxy finds the bind dead before it weighs the path's
			// other readings: 502, not the 400 of an ambiguous path.
			name: "dead bind, a reading of the path names a guarded bind",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{DownThreshold: time.Minute})
				root := newConn("root", 1)
				rt.reg.update(root, ann(svc("", "app.test")))
				admin := svc("/admin", "app.test")
				admin.Access = &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
				rt.reg.update(newConn("admin", 2), ann(admin))
				rt.reg.detach(root)
				time.Sleep(2 * time.Minute) // the bubble's clock passes client_down_threshold
				return rt
			},
			path: "/admin%2Fx", want: http.StatusBadGateway,
		},
		{
			name: "allowed_ips refuses the visitor",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{})
				rt.reg.updateAs(newConn("a", 1), ann(svc("", "app.test")), rights{allowed: []string{"app.test"}, allowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
				return rt
			},
			want: http.StatusBadGateway,
		},
		{
			name:  "free permit: dispatch",
			setup: serving(Config{GatewayTimeout: time.Second}, limited(2, "app.test")),
			want:  http.StatusOK,
		},
		{
			name: "free permit but the server is full", setting: "max_concurrent_requests",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{MaxConcurrentRequests: 1})
				rt.reg.update(newConn("a", 1), limited(2, "app.test"))
				rt.limits.takeGlobal(rt.cfg.MaxConcurrentRequests)
				t.Cleanup(rt.limits.releaseGlobal)
				return rt
			},
			want: http.StatusTooManyRequests,
		},
		{
			name: "saturated pool, no waiting", setting: "max_concurrent",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{})
				rt.reg.update(newConn("a", 1), limited(1, "app.test"))
				saturate(t, rt, "app.test")
				return rt
			},
			want: http.StatusTooManyRequests,
		},
		{
			name: "saturated pool: queue, then 429 client-concurrency", setting: "gateway_timeout",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{GatewayTimeout: time.Minute})
				rt.reg.update(newConn("a", 1), limited(1, "app.test"))
				saturate(t, rt, "app.test")
				return rt
			},
			want: http.StatusTooManyRequests,
		},
		{
			name: "no routable client: wait, then 504", setting: "gateway_timeout",
			setup: serving(Config{GatewayTimeout: 10 * time.Second}, unhealthy("app.test")),
			want:  http.StatusGatewayTimeout,
		},
		{
			name: "client just left: wait, then fallback redirect", setting: "gateway_timeout",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{GatewayTimeout: 10 * time.Second, DownThreshold: time.Minute,
					Fallbacks: []Fallback{{Hostname: "app.test", URL: "https://status.example.com/"}}})
				conn := newConn("a", 1)
				rt.reg.update(conn, ann(svc("", "app.test")))
				rt.reg.detach(conn)
				return rt
			},
			want: http.StatusFound,
		},
		{
			name: "armed: cold start held, then 504", setting: "cold_start",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &planScaler{}, GatewayTimeout: time.Second, MaxHeld: 3})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt
			},
			want: http.StatusGatewayTimeout,
		},
		{
			name: "armed, start under way: join, then fallback redirect", setting: "cold_start",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &planScaler{join: true}, MaxHeld: 3,
					Fallbacks: []Fallback{{Hostname: "app.test", URL: "https://status.example.com/"}}})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt
			},
			want: http.StatusFound,
		},
		{
			name: "armed, the start fails: 504", setting: "cold_start",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &orgScaler{}, MaxHeld: 3})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt
			},
			want: http.StatusGatewayTimeout,
		},
		{
			name: "armed, held places taken: 503", setting: "scaling_max_held",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &planScaler{}, MaxHeld: 1})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				// One request takes the one held place; the bubble's clock
				// runs its hold out once the test is done.
				done := make(chan int, 1)
				go func() { done <- serveOnce(t, rt, "GET", "app.test", "/", "") }()
				synctest.Wait()
				t.Cleanup(func() {
					if code := <-done; code != http.StatusGatewayTimeout {
						t.Errorf("held request after cold_start = %d, want 504", code)
					}
				})
				return rt
			},
			want: http.StatusServiceUnavailable,
		},
		{
			name: "armed, disarmed by the scaler: the usual wait, then 504", setting: "gateway_timeout",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &planScaler{err: errors.New("autoscale: scaling record disarmed")}, GatewayTimeout: 10 * time.Second})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: 45 * time.Second}})
				return rt
			},
			want: http.StatusGatewayTimeout,
		},
		{
			name: "armed, visitor refused by the armers' allowed_ips",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Scaler: &planScaler{}})
				rt.reg.SetArmed([]ArmedBind{{OrgID: "org_a", Pattern: "app.test", ColdStart: time.Minute, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
				return rt
			},
			want: http.StatusBadGateway,
		},
		{
			name: "stale copy", setting: "gateway_timeout",
			setup: withStale,
			path:  "/page", want: http.StatusOK,
		},
		{
			name: "no stale copy: wait, then 504", setting: "gateway_timeout",
			setup: withStale,
			path:  "/other", want: http.StatusGatewayTimeout,
		},
		{
			name: "CONNECT to a backend that does not take it", setting: "allow_connect",
			setup:  serving(Config{}, ann(svc("", "app.test"))),
			method: http.MethodConnect, want: http.StatusMethodNotAllowed,
		},
		{
			name:  "access: basic without credentials: 401",
			setup: serving(Config{}, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"ann": testBcrypt(t, "s3cret")}}}})),
			want:  http.StatusUnauthorized,
		},
		{
			name:   "access: basic with the right password: admitted",
			setup:  serving(Config{}, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"ann": testBcrypt(t, "s3cret")}}}})),
			header: http.Header{"Authorization": {basicAuth("ann", "s3cret")}},
			want:   http.StatusOK,
		},
		{
			name:  "access: default_access deny hides a service without auth",
			setup: serving(Config{Access: AccessConfig{Default: access.Deny}}, ann(svc("", "app.test"))),
			want:  http.StatusBadGateway,
		},
		{
			name:  "access: public service open under deny",
			setup: serving(Config{Access: AccessConfig{Default: access.Deny}}, accessAnn(&tunnel.Access{Public: true})),
			want:  http.StatusOK,
		},
		{
			name:  "access: denied_ips hides the service",
			setup: serving(Config{}, accessAnn(&tunnel.Access{DeniedIPs: []string{visitor.String()}})),
			want:  http.StatusBadGateway,
		},
		{
			name:  "access: allowed_ips admits the visitor",
			setup: serving(Config{}, accessAnn(&tunnel.Access{AllowedIPs: []string{"203.0.113.0/24"}})),
			want:  http.StatusOK,
		},
		{
			name:   "access: bearer admitted",
			setup:  serving(Config{Access: AccessConfig{Default: access.Deny}}, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}})),
			header: http.Header{"Authorization": {"Bearer " + testKey}},
			want:   http.StatusOK,
		},
		{
			name:   "access: bearer with a wrong key: 401",
			setup:  serving(Config{}, accessAnn(&tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}})),
			header: http.Header{"Authorization": {"Bearer " + testKey + "x"}},
			want:   http.StatusUnauthorized,
		},
		{
			name: "access: hidden with a fallback: the redirect of no route",
			setup: serving(Config{Access: AccessConfig{Default: access.Deny}, Fallbacks: []Fallback{{Hostname: "app.test", URL: "https://status.example.com/"}}},
				ann(svc("", "app.test"))),
			want: http.StatusFound,
		},
		{
			name: "route rule: redirect", setting: "routes[1]",
			setup: serving(Config{Policy: policy.Config{Routes: []policy.Route{
				{Host: "other.test", Respond: &policy.Respond{}},
				{Host: "app.test", Path: "/old", Redirect: &policy.Redirect{To: "https://new.test", Status: 301, PreservePath: true}},
			}}}, ann(svc("", "app.test"))),
			path: "/old/page", want: http.StatusMovedPermanently,
		},
		{
			name: "route rule: fixed answer without any client", setting: "routes[0]",
			setup: func(t *testing.T) *Router {
				return newRouter(t, Config{Policy: policy.Config{Routes: []policy.Route{
					{Host: "*.test", Path: "/healthz", Respond: &policy.Respond{Status: 299, Body: "ok"}},
				}}})
			},
			path: "/healthz", want: 299,
		},
		{
			name: "route rule with a policy: dispatch",
			setup: serving(Config{Policy: policy.Config{Routes: []policy.Route{
				{Host: "app.test", Policy: &policy.RoutePolicy{Timeout: time.Minute}},
			}}}, ann(svc("", "app.test"))),
			want: http.StatusOK,
		},
		{
			name: "route rule's rate limit: 429 route", setting: "rate_limits[1]",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{Policy: policy.Config{
					RateLimits: []policy.RateLimit{{Name: "other", Rate: 1}, {Name: "api", Rate: 0.001, Burst: 1}},
					Routes:     []policy.Route{{Path: "/api", Policy: &policy.RoutePolicy{RateLimit: "api"}}},
				}})
				rt.reg.update(newConn("a", 1), ann(svc("", "app.test")))
				if code := serveOnce(t, rt, "GET", "app.test", "/api", ""); code != http.StatusOK {
					t.Fatalf("the first request = %d, want 200", code)
				}
				return rt
			},
			path: "/api/x", want: http.StatusTooManyRequests,
		},
		{
			name: "route rule's rate limit with tokens left: dispatch",
			setup: serving(Config{Policy: policy.Config{
				RateLimits: []policy.RateLimit{{Name: "api", Rate: 1, Burst: 5}},
				Routes:     []policy.Route{{Path: "/api", Policy: &policy.RoutePolicy{RateLimit: "api"}}},
			}}, ann(svc("", "app.test"))),
			path: "/api/x", want: http.StatusOK,
		},
		{
			name: "CONNECT to a backend that takes it",
			setup: func(t *testing.T) *Router {
				rt := newRouter(t, Config{})
				a := ann(svc("", "app.test"))
				a.Services[0].AllowConnect = true
				rt.reg.update(newConn("a", 1), a)
				return rt
			},
			method: http.MethodConnect, want: http.StatusOK,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rt := tt.setup(t)
				method, host, path := tt.method, tt.host, tt.path
				if method == "" {
					method = http.MethodGet
				}
				if host == "" {
					host = "app.test"
				}
				if path == "" {
					path = "/"
				}
				q := explainQuery{host: host, path: path, ip: visitor, method: method}
				if tt.hostField != "" || tt.header != nil {
					q.header = tt.header.Clone()
					if q.header == nil {
						q.header = http.Header{}
					}
				}
				if tt.hostField != "" {
					q.header["Host"] = []string{tt.hostField}
				}
				ex := rt.explain(t.Context(), q)
				predicted := predictedStatus(ex)
				if tt.notProxied {
					if ex.Status != 0 || !strings.HasPrefix(ex.Verdict, "answered by aperio-server") {
						t.Errorf("Explain(%s%s) = %q, status %d; want answered by aperio-server, status 0", host, path, ex.Verdict, ex.Status)
					}
					predicted = tt.want
				}
				if ex.Setting != tt.setting {
					t.Errorf("Explain(%s %s%s).Setting = %q, want %q (verdict %q)", method, host, path, ex.Setting, tt.setting, ex.Verdict)
				}
				served := serveWith(t, rt, method, host, path, tt.hostField, tt.header)
				if predicted != served {
					t.Errorf("Explain(%s %s%s) predicts %d (verdict %q, after wait %q), proxy served %d\nsteps: %+v",
						method, host, path, predicted, ex.Verdict, ex.AfterWait, served, ex.Steps)
				}
				if served != tt.want {
					t.Errorf("proxy(%s %s%s) = %d, want %d", method, host, path, served, tt.want)
				}
			})
		})
	}
}

// serveOnce sends one request from visitor through rt and returns the
// status served.
func serveOnce(t testing.TB, rt *Router, method, host, path, hostField string) int {
	t.Helper()
	return serveWith(t, rt, method, host, path, hostField, nil)
}

// serveWith is serveOnce with request headers.
func serveWith(t testing.TB, rt *Router, method, host, path, hostField string, header http.Header) int {
	t.Helper()
	target := path
	if method == http.MethodConnect {
		target = host + ":443"
	}
	req := httptest.NewRequest(method, target, nil)
	req.Host = host
	req.RemoteAddr = netip.AddrPortFrom(visitor, 1234).String()
	for k, vv := range header {
		req.Header[k] = vv
	}
	if hostField != "" {
		req.Header["Host"] = []string{hostField}
	}
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, req)
	return rec.Code
}
