package router

import (
	"math"
	"net/http"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/telemetry"
)

// tokenRate is the max_rps bucket of one token, shared by every client of
// the token on this server, with the number of clients holding it.
type tokenRate struct {
	lim  *rate.Limiter
	rps  float64
	refs int
}

// rpsBurst is the burst of a max_rps bucket: one second's worth, at least
// one request.
func rpsBurst(rps float64) int { return max(1, int(math.Ceil(rps))) }

// tokenRateLocked returns the max_rps bucket e's clients take from under
// rights r, creating it or changing its rate as the token's setting says,
// and moves e's reference to it; nil when the token has no max_rps (and
// for the master token, which is never limited). rt.mu is held.
func (rt *Router) tokenRateLocked(e *clientEntry, r rights) *rate.Limiter {
	if r.master || r.tokenID == "" || r.maxRPS <= 0 {
		rt.releaseTokenRateLocked(e)
		return nil
	}
	if e.rateToken != r.tokenID {
		rt.releaseTokenRateLocked(e)
		tr := rt.rates[r.tokenID]
		if tr == nil {
			tr = &tokenRate{lim: rate.NewLimiter(rate.Limit(r.maxRPS), rpsBurst(r.maxRPS)), rps: r.maxRPS}
			rt.rates[r.tokenID] = tr
		}
		tr.refs++
		e.rateToken = r.tokenID
	}
	tr := rt.rates[r.tokenID]
	if tr.rps != r.maxRPS {
		// An edited token: a fresh bucket at the new rate (a full one,
		// as at the first connection), which each client of the token on
		// this server takes at its next update, within a heartbeat.
		tr.lim = rate.NewLimiter(rate.Limit(r.maxRPS), rpsBurst(r.maxRPS))
		tr.rps = r.maxRPS
	}
	return tr.lim
}

// releaseTokenRateLocked drops e's reference on its token's bucket, which
// goes with the last one. rt.mu is held.
func (rt *Router) releaseTokenRateLocked(e *clientEntry) {
	if e.rateToken == "" {
		return
	}
	if tr := rt.rates[e.rateToken]; tr != nil {
		if tr.refs--; tr.refs <= 0 {
			delete(rt.rates, e.rateToken)
		}
	}
	e.rateToken = ""
}

// checkTokenRate takes a request of the max_rps bucket of the token of the
// client s, whose permit the request holds; an empty bucket refuses with
// 429 token-rate. Only the proxy runs it: Explain does not predict it.
func (rt *Router) checkTokenRate(s *service) refusal {
	if lim := s.rate.Load(); lim != nil && !lim.Allow() {
		return refuseWith(refusedTokenRate)
	}
	return refusal{}
}

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

// takeStream counts a visitor's request against max_streams_per_ip, or
// answers 429 streams-per-ip and reports false. The caller releases a
// taken stream with releaseStream.
func (rt *Router) takeStream(w http.ResponseWriter, r *http.Request, rec *telemetry.Request, ip netip.Addr) bool {
	if rt.streams == nil || rt.streams.take(ip) {
		return true
	}
	rt.refuse(w, r, rec, limitStreamsPerIP)
	return false
}

func (rt *Router) releaseStream(ip netip.Addr) {
	if rt.streams != nil {
		rt.streams.release(ip)
	}
}

// takeWS reserves one of max_ws_connections for an upgrade request, or
// answers 503 with Retry-After and reports false. The caller releases a
// taken one with rt.wsOpen.Add(-1) once the relay (or the answer that
// was no upgrade) is over.
func (rt *Router) takeWS(w http.ResponseWriter, r *http.Request) bool {
	max := int64(rt.cfg.MaxWSConnections)
	if max <= 0 {
		rt.wsOpen.Add(1)
		return true
	}
	for {
		cur := rt.wsOpen.Load()
		if cur >= max {
			rt.wsRefused.Add(1)
			w.Header()["Retry-After"] = retryAfterOne
			rt.writePage(w, r, hostname.Normalize(r.Host), visitorAnswer{status: http.StatusServiceUnavailable, reason: "too many WebSocket connections: try again in a moment"})
			return false
		}
		if rt.wsOpen.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}
