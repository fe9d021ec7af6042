package router

import (
	"math"

	"golang.org/x/time/rate"
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
