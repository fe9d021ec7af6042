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

// tokenRates are the max_rps buckets by token ID, each kept while a
// client of the token is attached. It has no lock of its own: Registry.mu
// guards it (and the clientEntry.rateToken its methods move), and its
// methods expect it held.
type tokenRates map[string]*tokenRate

// holdLocked returns the max_rps bucket e's clients take from under
// rights r, creating it or changing its rate as the token's setting says,
// and moves e's reference to it; nil when the token has no max_rps (and
// for the master token, which is never limited). Registry.mu is held.
func (rs tokenRates) holdLocked(e *clientEntry, r rights) *rate.Limiter {
	if r.master || r.tokenID == "" || r.maxRPS <= 0 {
		rs.releaseLocked(e)
		return nil
	}
	if e.rateToken != r.tokenID {
		rs.releaseLocked(e)
		tr := rs[r.tokenID]
		if tr == nil {
			tr = &tokenRate{lim: rate.NewLimiter(rate.Limit(r.maxRPS), rpsBurst(r.maxRPS)), rps: r.maxRPS}
			rs[r.tokenID] = tr
		}
		tr.refs++
		e.rateToken = r.tokenID
	}
	tr := rs[r.tokenID]
	if tr.rps != r.maxRPS {
		// An edited token: a fresh bucket at the new rate (a full one,
		// as at the first connection), which each client of the token on
		// this server takes at its next update, within a heartbeat.
		tr.lim = rate.NewLimiter(rate.Limit(r.maxRPS), rpsBurst(r.maxRPS))
		tr.rps = r.maxRPS
	}
	return tr.lim
}

// releaseLocked drops e's reference on its token's bucket, which goes
// with the last one. Registry.mu is held.
func (rs tokenRates) releaseLocked(e *clientEntry) {
	if e.rateToken == "" {
		return
	}
	if tr := rs[e.rateToken]; tr != nil {
		if tr.refs--; tr.refs <= 0 {
			delete(rs, e.rateToken)
		}
	}
	e.rateToken = ""
}
