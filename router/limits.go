package router

import (
	"net/http"
	"net/netip"
	"sync"
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

// refuse answers 429 for kind, counts it and records it in rec. The
// visitor's page names no setting: x-aperio-limit does, for the operator.
func (rt *Router) refuse(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, kind limitKind) {
	rt.limited[kind].Add(1)
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

// takeGlobal takes a server-wide slot, or reports that none is free.
func (rt *Router) takeGlobal(limit int) bool {
	max := int64(limit)
	if max <= 0 {
		rt.global.Add(1)
		return true
	}
	for {
		cur := rt.global.Load()
		if cur >= max {
			return false
		}
		if rt.global.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

func (rt *Router) releaseGlobal() { rt.global.Add(-1) }

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
