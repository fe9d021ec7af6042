package telemetry

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// The shape of Stats' rolling windows: ten-second buckets for ten minutes
// (the 1m and 5m windows and the chart series) and one-minute buckets for
// an hour (the 1h window and the scaling events).
const (
	statsStep        = 10 // seconds per fine bucket
	statsFine        = 60 // fine buckets kept: the series' length
	statsCoarseStep  = 60 // seconds per coarse bucket
	statsCoarse      = 60 // coarse buckets kept: one hour
	statsHistBuckets = 34 // 0, (0,1ms], then half-octaves to about 46 s, then above
	statsWindow1m    = 6  // fine buckets in the 1m window
	statsWindow5m    = 30 // fine buckets in the 5m window
	statsWindow1h    = 60 // coarse buckets in the 1h window
)

// histUpper[i] is the upper bound, in milliseconds, of histogram bucket i:
// 0, 1, then 2^(k/2) for k = 1..31; the last bucket has no bound.
var histUpper = func() [statsHistBuckets - 1]float64 {
	var b [statsHistBuckets - 1]float64
	b[0], b[1] = 0, 1
	for i := 2; i < len(b); i++ {
		b[i] = math.Pow(2, float64(i-1)/2)
	}
	return b
}()

// histIndex returns the bucket of a duration of ms milliseconds. It is O(1)
// (one logarithm) and allocates nothing.
func histIndex(ms float64) int {
	switch {
	case ms <= 0:
		return 0
	case ms <= 1:
		return 1
	case !(ms <= histUpper[len(histUpper)-1]): // above the last bound, or NaN
		return statsHistBuckets - 1
	}
	i := 1 + int(math.Ceil(2*math.Log2(ms)))
	// Rounding of the logarithm may land one bucket off at a bound.
	if i < len(histUpper) && ms > histUpper[i] {
		i++
	} else if i > 1 && i-1 < len(histUpper) && ms <= histUpper[i-1] {
		i--
	}
	return min(i, statsHistBuckets-1)
}

// histQuantile estimates quantile q (0..1) of h in milliseconds,
// interpolating linearly inside the bucket it falls in; 0 for an empty h.
// A quantile in the open last bucket reads as that bucket's lower bound.
func histQuantile(h *[statsHistBuckets]uint64, total uint64, q float64) float64 {
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen uint64
	for i, n := range h {
		if n == 0 {
			continue
		}
		if float64(seen+n) >= rank {
			if i == 0 {
				return 0
			}
			if i >= len(histUpper) {
				return histUpper[len(histUpper)-1]
			}
			lo, hi := histUpper[i-1], histUpper[i]
			frac := (rank - float64(seen)) / float64(n)
			return lo + (hi-lo)*frac
		}
		seen += n
	}
	return histUpper[len(histUpper)-1]
}

// statsBucket is one time bucket of one hostname: about 300 bytes.
type statsBucket struct {
	epoch   int64 // Unix time / the ring's step; 0 while unused
	status  [len(statusClasses)]uint32
	held    uint32
	scaling uint32
	dur     [statsHistBuckets]uint32
	wait    [statsHistBuckets]uint32
}

// hostStats is one hostname's two rings: about 37 KiB, allocated when the
// hostname first ends a request.
type hostStats struct {
	name   string
	mu     sync.Mutex // guards the following fields
	fine   [statsFine]statsBucket
	coarse [statsCoarse]statsBucket
}

// bucketLocked returns the bucket of ring for time unix (seconds), reset
// when it last held an older epoch, or nil when it holds a newer one (a
// late record, which has no place left).
func bucketLocked(ring []statsBucket, step, unix int64) *statsBucket {
	e := unix / step
	b := &ring[e%int64(len(ring))]
	switch {
	case b.epoch == e:
	case b.epoch < e:
		*b = statsBucket{epoch: e}
	default:
		return nil
	}
	return b
}

// StatsConfig configures Stats. The zero value is ready: the wall clock
// and HostLabelLimit named hostnames.
type StatsConfig struct {
	// Now is the clock Read measures windows by; nil means time.Now.
	// Records are placed by the end time of their request.
	Now func() time.Time
	// HostLimit bounds the hostnames counted under their own name, as
	// HostLabelLimit does the metrics; 0 means HostLabelLimit. Later ones
	// share HostLabelOther; unrouted requests count as HostLabelUnrouted.
	HostLimit int
}

// Stats counts proxied requests per hostname over rolling windows (1m, 5m,
// 1h) with latency histograms, for GET /aperio/api/stats. Record costs one
// map lookup without a lock, one lock of the hostname's and no allocation
// after the hostname's first request. Memory is bounded: about 37 KiB per
// hostname, at most HostLimit+2 of them. It is safe for concurrent use.
type Stats struct {
	now func() time.Time
	// startFine is the fine bucket of the time NewStats ran (the
	// server's start): the series begin there, not before the server
	// existed.
	startFine int64
	limit     int
	hosts     atomic.Pointer[map[string]*hostStats]
	mu        sync.Mutex // serializes inserts into hosts
	other     *hostStats
}

// NewStats returns an empty Stats.
func NewStats(cfg StatsConfig) *Stats {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HostLimit <= 0 {
		cfg.HostLimit = HostLabelLimit
	}
	s := &Stats{now: cfg.Now, startFine: cfg.Now().Unix() / statsStep, limit: cfg.HostLimit, other: &hostStats{name: HostLabelOther}}
	m := map[string]*hostStats{}
	s.hosts.Store(&m)
	return s
}

// host returns name's stats, or the shared HostLabelOther ones past the
// limit.
func (s *Stats) host(name string) *hostStats {
	if h, ok := (*s.hosts.Load())[name]; ok {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.hosts.Load()
	if h, ok := old[name]; ok {
		return h
	}
	named := len(old)
	if _, ok := old[HostLabelUnrouted]; ok {
		named--
	}
	if named >= s.limit && name != HostLabelUnrouted {
		return s.other
	}
	m := make(map[string]*hostStats, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	h := &hostStats{name: name}
	m[name] = h
	s.hosts.Store(&m)
	return h
}

// Record counts rec, a request that just ended, at its end time
// (rec.Start + rec.Duration).
func (s *Stats) Record(rec *Request) {
	name := HostLabelUnrouted
	if rec.Routed {
		name = rec.Hostname
	}
	h := s.host(name)
	unix := rec.Start.Add(rec.Duration).Unix()
	class := statusClass(rec.Status)
	di := histIndex(millis(rec.Duration))
	wi := histIndex(millis(rec.QueueWait))
	var held uint32
	if rec.QueueWait > 0 || rec.Hold > 0 {
		held = 1
	}
	h.mu.Lock()
	for _, b := range [2]*statsBucket{bucketLocked(h.fine[:], statsStep, unix), bucketLocked(h.coarse[:], statsCoarseStep, unix)} {
		if b == nil {
			continue
		}
		b.status[class]++
		b.held += held
		b.dur[di]++
		b.wait[wi]++
	}
	h.mu.Unlock()
}

// Scaling counts a scaling call or disarm on hostname host at at, for the
// last hour's scaling events. A hostname past the limit counts as
// HostLabelOther.
func (s *Stats) Scaling(host string, at time.Time) {
	h := s.host(host)
	h.mu.Lock()
	if b := bucketLocked(h.coarse[:], statsCoarseStep, at.Unix()); b != nil {
		b.scaling++
	}
	h.mu.Unlock()
}

// StatsReading is what Read returns.
type StatsReading struct {
	// At is the time the windows end at.
	At time.Time
	// Hosts holds each kept hostname with a request in the last hour,
	// sorted by hostname.
	Hosts []apitype.HostStats
	// ScalingEvents1h sums the kept hostnames' scaling events of the last
	// hour (hostnames without requests included).
	ScalingEvents1h int
}

// Read returns the windows ending now of every hostname keep accepts (nil
// keeps all). keep is called once per hostname, without a lock held.
func (s *Stats) Read(keep func(hostname string) bool) StatsReading {
	now := s.now()
	out := StatsReading{At: now, Hosts: []apitype.HostStats{}}
	m := *s.hosts.Load()
	all := make([]*hostStats, 0, len(m)+1)
	for _, h := range m {
		all = append(all, h)
	}
	all = append(all, s.other)
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	unix := now.Unix()
	for _, h := range all {
		if keep != nil && !keep(h.name) {
			continue
		}
		hs, scaling, any := h.read(unix, s.startFine)
		out.ScalingEvents1h += scaling
		if any {
			out.Hosts = append(out.Hosts, hs)
		}
	}
	return out
}

// read returns h's windows ending at unix, its series from the fine
// bucket startFine on (at most statsFine buckets), its scaling events of
// the last hour, and whether it had a request in that hour. The
// unrouted requests' windows have no errors: a hostname nobody binds is a
// visitor's miss, not a service's failure, whatever status it got.
func (h *hostStats) read(unix, startFine int64) (apitype.HostStats, int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fineNow, coarseNow := unix/statsStep, unix/statsCoarseStep
	first := max(fineNow-statsFine+1, min(startFine, fineNow))
	hs := apitype.HostStats{Hostname: h.name, Windows: make(map[string]apitype.StatsWindow, 3), Series: make([]apitype.StatsBucket, 0, fineNow-first+1)}
	hs.Windows[apitype.Window1m] = window(h.fine[:], fineNow, statsWindow1m, statsWindow1m*statsStep)
	hs.Windows[apitype.Window5m] = window(h.fine[:], fineNow, statsWindow5m, statsWindow5m*statsStep)
	w1h := window(h.coarse[:], coarseNow, statsWindow1h, statsWindow1h*statsCoarseStep)
	hs.Windows[apitype.Window1h] = w1h
	if h.name == HostLabelUnrouted {
		for k, w := range hs.Windows {
			w.Errors, w.ErrorRate = 0, 0
			hs.Windows[k] = w
		}
	}
	for e := first; e <= fineNow; e++ {
		sb := apitype.StatsBucket{At: e * statsStep}
		if b := &h.fine[e%statsFine]; b.epoch == e {
			sb.Status2xx, sb.Status3xx, sb.Status4xx, sb.Status5xx = int64(b.status[2]), int64(b.status[3]), int64(b.status[4]), int64(b.status[5])
			sb.Aborted = int64(b.status[0])
			for _, n := range b.status {
				sb.Requests += int64(n)
			}
		}
		hs.Series = append(hs.Series, sb)
	}
	scaling := 0
	for e := coarseNow - statsCoarse + 1; e <= coarseNow; e++ {
		if b := &h.coarse[e%statsCoarse]; b.epoch == e {
			scaling += int(b.scaling)
		}
	}
	return hs, scaling, w1h.Requests > 0
}

// window sums the n buckets of ring up to epoch now and turns them into
// a window of seconds length.
func window(ring []statsBucket, now int64, n int, seconds int) apitype.StatsWindow {
	var (
		status    [len(statusClasses)]uint64
		held      uint64
		dur, wait [statsHistBuckets]uint64
	)
	for e := now - int64(n) + 1; e <= now; e++ {
		b := &ring[e%int64(len(ring))]
		if b.epoch != e {
			continue
		}
		for i, c := range b.status {
			status[i] += uint64(c)
		}
		held += uint64(b.held)
		for i := range b.dur {
			dur[i] += uint64(b.dur[i])
			wait[i] += uint64(b.wait[i])
		}
	}
	var total uint64
	for _, c := range status {
		total += c
	}
	w := apitype.StatsWindow{
		Requests:  int64(total),
		RPS:       float64(total) / float64(seconds),
		Aborted:   int64(status[0]),
		Status2xx: int64(status[2]),
		Status3xx: int64(status[3]),
		Status4xx: int64(status[4]),
		Status5xx: int64(status[5]),
		Held:      int64(held),
	}
	w.Errors = w.Status5xx + w.Aborted
	if total > 0 {
		w.ErrorRate = float64(w.Errors) / float64(total)
	}
	w.P50MS = histQuantile(&dur, total, 0.50)
	w.P90MS = histQuantile(&dur, total, 0.90)
	w.P99MS = histQuantile(&dur, total, 0.99)
	w.QueueWaitP99MS = histQuantile(&wait, total, 0.99)
	return w
}
