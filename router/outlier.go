package router

import (
	"log/slog"
	"sync"
	"sync/atomic"
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

// outliers is passive outlier ejection: its settings, the lock that
// keeps ejections within outlier_max_ejected_percent, and the count of
// ejections. A service's own streak and ejection live on the service
// (fails, ejections, ejectedUntil); a pool's members are read from the
// pool's snapshot, so no Router lock is needed. Safe for concurrent use.
type outliers struct {
	consecutive int           // outlier_consecutive_5xx; zero or less turns ejection off
	base        time.Duration // outlier_ejection_time, the first ejection's
	maxPercent  int           // outlier_max_ejected_percent, 0..100
	log         *slog.Logger

	mu    sync.Mutex   // makes an ejection's bound check and the ejection one step
	total atomic.Int64 // ejections since the router started
}

// newOutliers returns the outlier ejection of cfg's outlier_* settings,
// logging ejections to log.
func newOutliers(cfg Config, log *slog.Logger) *outliers {
	return &outliers{consecutive: cfg.OutlierConsecutive5xx, base: cfg.OutlierEjectionTime, maxPercent: cfg.OutlierMaxEjectedPercent, log: log}
}

// observe records the status of an answer of s for outlier ejection.
func (o *outliers) observe(s *service, status int) {
	n := o.consecutive
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
	o.eject(s)
}

// eject takes s out of rotation unless that would eject more than
// outlier_max_ejected_percent of one of its pools. One mutex makes the
// count and the ejection one step, so concurrent failures cannot together
// pass the bound.
func (o *outliers) eject(s *service) {
	o.mu.Lock()
	defer o.mu.Unlock()
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
			if out*100 > o.maxPercent*len(ms) {
				return
			}
		}
	}
	k := s.ejections.Add(1)
	base := o.base
	d := base * maxEjectionFactor
	if k <= 4 { // 2^3 = 8 < 10 <= 2^4: beyond the fourth, the cap
		d = min(base<<(k-1), d)
	}
	until := time.Now().Add(d)
	s.ejectedUntil.Store(until.UnixNano())
	s.fails.Store(0)
	o.total.Add(1)
	o.log.Info("client ejected", logkey.ClientID, s.conn.ID(), logkey.Service, s.id, logkey.Until, until, logkey.Ejections, k)
}

// Weight returns the weight conn's service balances with (its announced
// weight, clamped), or 0 when it has no such service.
func (rg *Registry) Weight(conn Conn, serviceID string) int {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if e := rg.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil {
			return int(s.weight.Load())
		}
	}
	return 0
}

// EjectedUntil returns when the ejection of conn's service ends, or the
// zero time when it is not ejected now.
func (rg *Registry) EjectedUntil(conn Conn, serviceID string) time.Time {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if e := rg.clients[conn]; e != nil {
		if s := e.services[serviceID]; s != nil && s.ejected() {
			return time.Unix(0, s.ejectedUntil.Load())
		}
	}
	return time.Time{}
}
