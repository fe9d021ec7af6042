package router

import (
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Passive outlier ejection: a client service whose answers keep failing
// (outlier_consecutive_5xx answers of 5xx in a row) leaves rotation for
// outlier_ejection_time, doubled for every ejection in a row without a
// good answer in between, up to ten times. outlier_max_ejected_percent of
// a pool's members may be ejected at once, so a bind whose every client
// fails (a bad deploy, a shared database down) keeps serving rather than
// going dark; a pool of one client never ejects it.

// maxEjectionFactor caps the doubling of the ejection time.
const maxEjectionFactor = 10

// ejected reports whether s is out of rotation now. A service never
// ejected (or reinstated by a good answer since) pays one atomic load and
// no clock read.
func (s *service) ejected() bool {
	u := s.ejectedUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// observe records the status of an answer of s for outlier ejection.
func (rt *Router) observe(s *service, status int) {
	n := rt.cfg.OutlierConsecutive5xx
	if n <= 0 {
		return
	}
	if status < 500 {
		if s.fails.Load() != 0 {
			s.fails.Store(0)
		}
		if s.ejectedUntil.Load() != 0 && !s.ejected() {
			// Back and answering well: the next ejection starts over at
			// outlier_ejection_time.
			s.ejectedUntil.Store(0)
			s.ejections.Store(0)
		}
		return
	}
	if s.fails.Add(1) < int64(n) {
		return
	}
	rt.eject(s)
}

// eject takes s out of rotation unless that would eject more than
// outlier_max_ejected_percent of one of its pools. One mutex makes the
// count and the ejection one step, so concurrent failures cannot together
// pass the bound.
func (rt *Router) eject(s *service) {
	rt.ejectMu.Lock()
	defer rt.ejectMu.Unlock()
	if s.ejected() {
		return
	}
	if ps := s.pools.Load(); ps != nil {
		for _, p := range *ps {
			ms := *p.members.Load()
			out := 1
			for _, m := range ms {
				if m != s && m.ejected() {
					out++
				}
			}
			if out*100 > rt.cfg.OutlierMaxEjectedPercent*len(ms) {
				return
			}
		}
	}
	k := s.ejections.Add(1)
	base := rt.cfg.OutlierEjectionTime
	d := base * maxEjectionFactor
	if k <= 4 { // 2^3 = 8 < 10 <= 2^4: beyond the fourth, the cap
		d = min(base<<(k-1), d)
	}
	until := time.Now().Add(d)
	s.ejectedUntil.Store(until.UnixNano())
	s.fails.Store(0)
	rt.ejectionsTotal.Add(1)
	rt.log.Info("client ejected", logkey.ClientID, s.conn.ID(), logkey.Service, s.id, logkey.Until, until, logkey.Ejections, k)
}

// Weight returns the weight conn's service balances with (its announced
// weight, clamped), or 0 when it has no such service.
func (rt *Router) Weight(conn Conn, serviceID string) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if e := rt.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil {
			return int(s.weight.Load())
		}
	}
	return 0
}

// EjectedUntil returns when the ejection of conn's service ends, or the
// zero time when it is not ejected now.
func (rt *Router) EjectedUntil(conn Conn, serviceID string) time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if e := rt.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil && s.ejected() {
			return time.Unix(0, s.ejectedUntil.Load())
		}
	}
	return time.Time{}
}
