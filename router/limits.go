package router

import (
	"math"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

// limitKind names a 429's cause in x-aperio-limit and in metrics.
type limitKind int

const (
	limitIP limitKind = iota
	limitServerConcurrency
	limitClientConcurrency
	limitTokenRate
	limitRoute // a route's rate limit: its setting is the rate_limits entry
	limitStreamsPerIP
	limitTokenQuota
	limitOrgQuota
	numLimitKinds
)

// limitInfo is what a 429 of each kind says in x-aperio-limit: its name
// and the setting to raise. Every kind here is retried soon: its 429
// carries Retry-After: 1 (a quota kind, which refills only with its
// period, would carry none).
var limitInfo = [numLimitKinds]struct {
	kind, setting string
}{
	limitIP:                {"ip", "ip_limit_max"},
	limitServerConcurrency: {"server-concurrency", "max_concurrent_requests"},
	limitClientConcurrency: {"client-concurrency", "max_concurrent"},
	limitTokenRate:         {"token-rate", "token.max_rps"},
	limitRoute:             {"route", "rate_limits"},
	limitStreamsPerIP:      {"streams-per-ip", "max_streams_per_ip"},
	limitTokenQuota:        {"token-quota", "token.daily_max_bytes"},
	limitOrgQuota:          {"org-quota", "org.monthly_max_bytes"},
}

// limitHeader holds the precomputed x-aperio-limit values.
var limitHeader = func() (h [numLimitKinds][]string) {
	for k, li := range limitInfo {
		h[k] = []string{li.kind + "; setting=" + li.setting}
	}
	return h
}()

var retryAfterOne = []string{"1"}

// admissionLimits are the bounds the router keeps on the proxied requests
// of every hostname together: the server-wide slots
// (max_concurrent_requests), the requests of one visitor address
// (max_streams_per_ip) and the WebSocket relays (max_ws_connections),
// with the counts of what these and the other limits refused. It owns
// its counters, each an atomic or under its own lock, so the request path
// takes no Router lock for them. Safe for concurrent use; the zero value
// bounds nothing.
type admissionLimits struct {
	global  atomic.Int64 // proxied requests holding a server-wide slot
	streams *ipStreams   // concurrent requests per visitor address; nil: max_streams_per_ip off
	wsMax   int64        // max_ws_connections; zero means no bound

	wsOpen    atomic.Int64 // WebSocket relays open or being opened
	wsRefused atomic.Int64 // upgrades refused by max_ws_connections

	limited [numLimitKinds]atomic.Int64 // 429s by kind
}

// newAdmissionLimits returns the limits of cfg's max_streams_per_ip and
// max_ws_connections; max_concurrent_requests is passed to takeGlobal,
// since Reconfigure may change it.
func newAdmissionLimits(cfg Config) *admissionLimits {
	l := &admissionLimits{wsMax: int64(cfg.MaxWSConnections)}
	if cfg.MaxStreamsPerIP > 0 {
		l.streams = newIPStreams(cfg.MaxStreamsPerIP)
	}
	return l
}

// count counts a 429 of kind.
func (l *admissionLimits) count(kind limitKind) { l.limited[kind].Add(1) }

// takeGlobal takes a server-wide slot, or reports that limit are taken
// already; a limit of zero or less takes one unbounded. The caller
// releases a taken slot with releaseGlobal.
func (l *admissionLimits) takeGlobal(limit int) bool {
	max := int64(limit)
	if max <= 0 {
		l.global.Add(1)
		return true
	}
	for {
		cur := l.global.Load()
		if cur >= max {
			return false
		}
		if l.global.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// releaseGlobal gives back a slot of takeGlobal.
func (l *admissionLimits) releaseGlobal() { l.global.Add(-1) }

// takeStream counts a visitor's request against max_streams_per_ip, or
// reports that ip has that many in flight already (the caller answers
// 429 streams-per-ip). The caller releases a taken stream with
// releaseStream.
func (l *admissionLimits) takeStream(ip netip.Addr) bool {
	return l.streams == nil || l.streams.take(ip)
}

// releaseStream gives back a stream of takeStream.
func (l *admissionLimits) releaseStream(ip netip.Addr) {
	if l.streams != nil {
		l.streams.release(ip)
	}
}

// takeWS reserves one of max_ws_connections for an upgrade request, or
// counts a refusal and reports false (the caller answers 503 with
// Retry-After). The caller releases a taken one with releaseWS once the
// relay (or the answer that was no upgrade) is over.
func (l *admissionLimits) takeWS() bool {
	if l.wsMax <= 0 {
		l.wsOpen.Add(1)
		return true
	}
	for {
		cur := l.wsOpen.Load()
		if cur >= l.wsMax {
			l.wsRefused.Add(1)
			return false
		}
		if l.wsOpen.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// releaseWS gives back a relay of takeWS.
func (l *admissionLimits) releaseWS() { l.wsOpen.Add(-1) }

// ipStreams counts the proxied requests in flight per visitor address. An
// address has an entry only while it has requests in flight, so the map
// holds at most as many entries as requests in flight.
type ipStreams struct {
	max int32

	mu sync.Mutex // guards n
	n  map[netip.Addr]int32
}

func newIPStreams(max int) *ipStreams {
	return &ipStreams{max: int32(min(max, math.MaxInt32)), n: make(map[netip.Addr]int32)}
}

// take counts one more request of ip, or reports that ip has max already.
func (l *ipStreams) take(ip netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip] >= l.max {
		return false
	}
	l.n[ip]++
	return true
}

// release counts one request of ip less.
func (l *ipStreams) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[ip] <= 1 {
		delete(l.n, ip)
		return
	}
	l.n[ip]--
}

// refuse answers 429 for kind, counts it and records it in rec. The
// visitor's page names no setting: x-aperio-limit does, for the operator.
func (rt *Router) refuse(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, kind limitKind) {
	rt.limits.count(kind)
	rec.Limit = limitInfo[kind].kind
	h := w.Header()
	h["X-Aperio-Limit"] = limitHeader[kind]
	if kind != limitTokenQuota && kind != limitOrgQuota {
		// A quota refills only with its period: no Retry-After.
		h["Retry-After"] = retryAfterOne
	}
	host := ""
	if r != nil {
		host = hostname.Normalize(r.Host)
	}
	rt.writePage(w, r, host, visitorAnswer{status: http.StatusTooManyRequests, reason: "too many requests: try again in a moment"})
}

// ipLimiter is the per-visitor token bucket. Its table is bounded: past
// maxIPs entries, buckets that have refilled completely (visitors that went
// quiet, and so carry no state worth keeping) are dropped; if none has, the
// whole table is reset rather than grow without bound, which at worst gives
// some visitors a fresh burst.
type ipLimiter struct {
	burst  int
	refill rate.Limit

	mu      sync.Mutex // guards buckets
	buckets map[netip.Addr]*rate.Limiter
}

const maxIPs = 100_000

func newIPLimiter(burst int, refill float64) *ipLimiter {
	return &ipLimiter{burst: burst, refill: rate.Limit(refill), buckets: make(map[netip.Addr]*rate.Limiter)}
}

// allow takes a token for ip. The zero Addr (a peer that is no IP
// address) has one bucket like any visitor.
func (l *ipLimiter) allow(ip netip.Addr, now time.Time) bool {
	l.mu.Lock()
	b := l.buckets[ip]
	if b == nil {
		if len(l.buckets) >= maxIPs {
			l.sweepLocked(now)
		}
		b = rate.NewLimiter(l.refill, l.burst)
		l.buckets[ip] = b
	}
	l.mu.Unlock()
	return b.AllowN(now, 1)
}

func (l *ipLimiter) sweepLocked(now time.Time) {
	for ip, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, ip)
		}
	}
	if len(l.buckets) >= maxIPs {
		l.buckets = make(map[netip.Addr]*rate.Limiter)
	}
}

// Charge takes a token of r's visitor's bucket for a request the router
// does not proxy (an admin API login, a tunnel handshake). With the bucket
// empty it answers 429 with x-aperio-limit ip, counts it, and reports
// false. Without ip_limit_max it always reports true.
func (rt *Router) Charge(w http.ResponseWriter, r *http.Request) bool {
	if ips := rt.settingsOf(r).ips; ips == nil || ips.allow(VisitorOf(r).Addr, time.Now()) {
		return true
	}
	var rec telemetry.Request
	rt.refuse(w, r, &rec, limitIP)
	return false
}
