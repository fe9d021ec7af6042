// Package concurrency owns the client's per-service concurrency limit: the
// number of requests a backend is believed to take at once. The limit is
// either fixed (max_concurrent) or learnt from outcomes, by AIMD (additive
// increase, multiplicative decrease on failures) or by load signals (system
// CPU, memory, scheduler lag and backend health sampled over a window). The
// agent feeds it outcomes and announces its desired value; the server's
// per-client limiter enforces what was announced.
package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// Mode is how a Limiter sets its limit.
type Mode string

// The modes. ModeFixed never changes the limit; ModeAIMD and ModeLoadSignal
// are the dynamic modes.
const (
	ModeFixed      Mode = "fixed"
	ModeAIMD       Mode = "aimd"
	ModeLoadSignal Mode = "load-signal"
)

// Defaults of the dynamic modes, applied by New to zero fields.
const (
	DefaultMin                     = 1
	DefaultMax                     = 100
	DefaultIncreaseAfterSuccesses  = 10
	DefaultDecreaseFactor          = 0.5
	DefaultInterval                = time.Second
	DefaultWindow                  = 10 * time.Second
	DefaultScaleUpStepRatio        = 0.05
	DefaultScaleDownStepRatio      = 0.05
	DefaultDesiredUtilizationRatio = 0.9
	DefaultMinSamples              = 5
)

// LoggerName is the value of the "logger" attribute of every log line a
// Limiter writes, so that operators can filter the concurrency events
// (log_level: debug shows each "concurrency changed").
const LoggerName = "aperio.concurrency"

// Config configures a Limiter. The zero value of every dynamic field means
// its default.
type Config struct {
	// Mode is fixed, aimd or load-signal. Empty means fixed.
	Mode Mode
	// Fixed is the pinned limit of ModeFixed, normalized to at least 1.
	Fixed int
	// Min and Max bound the dynamic limit (defaults 1 and 100); Min is
	// normalized to at least 1. Max below Min is an error.
	Min, Max int
	// Initial is the first desired value of a dynamic mode, clamped to
	// [Min, Max]. 0 means Min.
	Initial int

	// IncreaseAfterSuccesses is the AIMD success streak that raises the
	// limit by one (default 10, normalized to at least 1).
	IncreaseAfterSuccesses int
	// DecreaseFactor multiplies the limit on a failure (default 0.5); a
	// value outside (0, 1] falls back to 0.5 with a warning.
	DecreaseFactor float64

	// Interval is how often load signals are evaluated (default 1s).
	Interval time.Duration
	// Window is how far back signal snapshots count (default 10s).
	Window time.Duration
	// ScaleUpStepRatio and ScaleDownStepRatio size a load-signal step as a
	// fraction of the current limit, at least one (defaults 0.05).
	ScaleUpStepRatio, ScaleDownStepRatio float64
	// DesiredUtilizationRatio is the mean healthy ratio at which the limit
	// rises (default 0.9).
	DesiredUtilizationRatio float64
	// MinSamples is how many snapshots a signal needs in the window before
	// it counts (default 5, at least 1).
	MinSamples int
	// Signals are evaluated in load-signal mode. With none, load-signal mode
	// falls back to AIMD with 10 / 0.5 and a warning.
	Signals []*Signal
	// Backend, when set, records every outcome as a backend-health snapshot
	// (successes healthy, failures overloaded). It should also be one of
	// Signals to count in load-signal mode.
	Backend *Signal

	// Name names the service in logs.
	Name string
	// Logger receives warnings and the "concurrency changed" debug events;
	// nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnChange, when set, is called after every change of the desired
	// value, outside the lock, with the new snapshot. It must not block.
	OnChange func(Snapshot)
}

// DefaultConfig returns the defaults of a dynamic limit, in AIMD mode: the
// Default constants, which New applies to the zero fields of a dynamic
// Config. Signals, Backend, Logger, Now and OnChange are nil.
func DefaultConfig() Config {
	return Config{
		Mode:                    ModeAIMD,
		Min:                     DefaultMin,
		Max:                     DefaultMax,
		IncreaseAfterSuccesses:  DefaultIncreaseAfterSuccesses,
		DecreaseFactor:          DefaultDecreaseFactor,
		Interval:                DefaultInterval,
		Window:                  DefaultWindow,
		ScaleUpStepRatio:        DefaultScaleUpStepRatio,
		ScaleDownStepRatio:      DefaultScaleDownStepRatio,
		DesiredUtilizationRatio: DefaultDesiredUtilizationRatio,
		MinSamples:              DefaultMinSamples,
	}
}

// Validate reports the problems New refuses: an unknown mode, and a
// dynamic Max below Min. Out-of-range values New normalizes with a warning
// are not problems.
func (cfg Config) Validate() error {
	switch cfg.Mode {
	case "", ModeFixed:
		return nil
	case ModeAIMD, ModeLoadSignal:
		if minimum := max(cfg.Min, DefaultMin); cfg.Max != 0 && cfg.Max < minimum {
			return fmt.Errorf("concurrency: max %d is below min %d", cfg.Max, minimum)
		}
		return nil
	}
	return fmt.Errorf("concurrency: unknown mode %q (fixed, aimd, load-signal)", cfg.Mode)
}

// Snapshot is a Limiter's state as observed from outside.
type Snapshot struct {
	Mode    Mode `json:"mode"`
	Desired int  `json:"desired"`
	Min     int  `json:"min"`
	Max     int  `json:"max"`
	Fixed   bool `json:"fixed"`
}

// Outcome is what one request told about the backend.
type Outcome int

const (
	// Success is an answer that shows no overload (2xx, 3xx, 4xx but 429).
	Success Outcome = iota
	// Failure is an overload or retryable outcome: a 5xx, a 429, a
	// timeout or a connection error. Timeouts must count here, or AIMD
	// climbs to the ceiling while everything times out.
	Failure
	// Ignored is a request that ended without a verdict on the backend:
	// the visitor left before the answer. It is neither a success nor a
	// failure: it frees its slot and changes neither the limit, the
	// success streak, nor the backend signal. Counting it as a failure
	// would let impatient visitors halve a healthy backend's limit.
	Ignored
)

// Limiter holds one service's concurrency limit. It is safe for concurrent
// use; Begin and End are cheap (one mutex).
type Limiter struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	mode Mode

	mu       sync.Mutex // guards the following fields
	desired  int
	inflight int
	streak   int
	// epoch counts decreases. A failure of a request that began before the
	// last decrease does not decrease again: the decrease already answered
	// the overload it saw, and without this a burst of failures from one
	// overloaded moment would collapse the limit to min at once.
	epoch uint64
	// peak is the most requests in flight since the last evaluation: a
	// load-signal limit rises only if the service came near it.
	peak int
}

// New normalizes cfg and returns a Limiter. Normalizations that change a
// configured value are logged as warnings; only impossible bounds (Max
// below Min) are an error.
func New(cfg Config) (*Limiter, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logkey.Logger, LoggerName, logkey.Service, cfg.Name)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{log: log, now: now}
	switch cfg.Mode {
	case "", ModeFixed:
		n := max(cfg.Fixed, 1)
		cfg.Mode, cfg.Min, cfg.Max, cfg.Initial = ModeFixed, n, n, n
	case ModeAIMD, ModeLoadSignal:
		l.normalizeDynamic(&cfg)
	}
	l.cfg, l.mode, l.desired = cfg, cfg.Mode, cfg.Initial
	return l, nil
}

func (l *Limiter) normalizeDynamic(c *Config) {
	if c.Min < 1 {
		c.Min = DefaultMin
	}
	if c.Max == 0 {
		c.Max = max(DefaultMax, c.Min)
	}
	if c.Initial == 0 {
		c.Initial = c.Min
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if c.Mode == ModeLoadSignal && len(c.Signals) == 0 {
		l.log.Warn("load-signal mode without signals, using aimd", logkey.Reason, "no signal enabled")
		c.Mode, c.IncreaseAfterSuccesses, c.DecreaseFactor = ModeAIMD, DefaultIncreaseAfterSuccesses, DefaultDecreaseFactor
	}
	if c.IncreaseAfterSuccesses < 1 {
		if c.IncreaseAfterSuccesses < 0 {
			l.log.Warn("increase_after_successes below 1, using 1", logkey.Value, c.IncreaseAfterSuccesses)
			c.IncreaseAfterSuccesses = 1
		} else {
			c.IncreaseAfterSuccesses = DefaultIncreaseAfterSuccesses
		}
	}
	if c.DecreaseFactor == 0 {
		c.DecreaseFactor = DefaultDecreaseFactor
	} else if !(c.DecreaseFactor > 0 && c.DecreaseFactor <= 1) {
		l.log.Warn("decrease_factor outside (0, 1], using 0.5", logkey.Value, c.DecreaseFactor)
		c.DecreaseFactor = DefaultDecreaseFactor
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	c.ScaleUpStepRatio = ratioOr(c.ScaleUpStepRatio, DefaultScaleUpStepRatio)
	c.ScaleDownStepRatio = ratioOr(c.ScaleDownStepRatio, DefaultScaleDownStepRatio)
	c.DesiredUtilizationRatio = ratioOr(c.DesiredUtilizationRatio, DefaultDesiredUtilizationRatio)
	if c.MinSamples < 1 {
		c.MinSamples = DefaultMinSamples
	}
}

// ratioOr returns r when it is in (0, 1], def otherwise.
func ratioOr(r, def float64) float64 {
	if r > 0 && r <= 1 {
		return r
	}
	return def
}

// Mode returns the mode in force after normalization (a load-signal
// limiter with no signal reports aimd).
func (l *Limiter) Mode() Mode { return l.mode }

// Snapshot returns the current state.
func (l *Limiter) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

func (l *Limiter) snapshotLocked() Snapshot {
	return Snapshot{Mode: l.mode, Desired: l.desired, Min: l.cfg.Min, Max: l.cfg.Max, Fixed: l.mode == ModeFixed}
}

// Desired returns the current limit.
func (l *Limiter) Desired() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.desired
}

// Ticket is a request in flight, from Begin to End.
type Ticket struct {
	epoch uint64
	// near is set when the request began with the service at or near its
	// limit: only then is its success evidence that more would fit.
	near bool
}

// Begin records the start of a request and returns its ticket for End.
func (l *Limiter) Begin() Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight++
	l.peak = max(l.peak, l.inflight)
	return Ticket{epoch: l.epoch, near: nearLimit(l.inflight, l.desired)}
}

// nearLimit reports whether inflight is at least 80% of desired (at least
// desired-1 for small limits): close enough that a success says the
// backend took (almost) the whole limit.
func nearLimit(inflight, desired int) bool {
	return inflight*5 >= desired*4 || inflight >= desired-1
}

// End records the outcome of the request t and adjusts the limit in AIMD
// mode. In fixed mode it only counts; in load-signal mode the outcome
// reaches the limit through the Backend signal at the next evaluation. An
// Ignored outcome only ends the request.
func (l *Limiter) End(t Ticket, o Outcome) {
	if b := l.cfg.Backend; b != nil && l.mode != ModeFixed && o != Ignored {
		b.Record(l.now(), o == Failure)
	}
	l.mu.Lock()
	l.inflight--
	if l.mode != ModeAIMD || o == Ignored {
		l.mu.Unlock()
		return
	}
	before := l.desired
	switch o {
	case Success:
		if t.near {
			l.streak++
			if l.streak >= l.cfg.IncreaseAfterSuccesses {
				l.streak = 0
				l.setLocked(l.desired + 1)
			}
		}
	case Failure:
		l.streak = 0
		if t.epoch == l.epoch {
			l.setLocked(int(math.Round(float64(l.desired) * l.cfg.DecreaseFactor)))
			if l.desired != before {
				l.epoch++
			}
		}
	}
	l.changedLocked(before)
}

// setLocked sets desired clamped to [min, max].
func (l *Limiter) setLocked(n int) {
	l.desired = min(max(n, l.cfg.Min), l.cfg.Max)
}

// changedLocked unlocks l.mu and, if desired moved from before, logs the
// change and calls OnChange.
func (l *Limiter) changedLocked(before int) {
	if l.desired == before {
		l.mu.Unlock()
		return
	}
	s := l.snapshotLocked()
	l.mu.Unlock()
	l.log.Debug("concurrency changed", logkey.Mode, string(s.Mode), logkey.Desired, s.Desired, logkey.Current, before, logkey.Min, s.Min, logkey.Max, s.Max)
	if l.cfg.OnChange != nil {
		l.cfg.OnChange(s)
	}
}

// Evaluate runs one load-signal evaluation at now: any overloaded latest
// snapshot lowers the limit by ceil(current × scale_down_step_ratio);
// otherwise, if the signals with at least min_samples snapshots in the
// window have a mean healthy ratio of at least desired_utilization_ratio,
// it rises by ceil(current × scale_up_step_ratio); otherwise it holds. Both
// steps are at least one. As in AIMD, it rises only if the service had at
// or near its limit in flight at some point since the previous evaluation:
// healthy signals on an idle service say nothing about a larger limit, and
// a limit grown while idle would let the next burst overload the backend.
// It does nothing outside load-signal mode.
func (l *Limiter) Evaluate(now time.Time) {
	if l.mode != ModeLoadSignal {
		return
	}
	overloaded := false
	var sum float64
	counted := 0
	since := now.Add(-l.cfg.Window)
	for _, s := range l.cfg.Signals {
		st := s.stats(since)
		if st.latestOverloaded {
			overloaded = true
		}
		if st.samples >= l.cfg.MinSamples {
			sum += st.healthyRatio()
			counted++
		}
	}
	l.mu.Lock()
	before := l.desired
	busy := nearLimit(l.peak, before)
	l.peak = l.inflight
	switch {
	case overloaded:
		l.setLocked(before - step(before, l.cfg.ScaleDownStepRatio))
	case busy && counted > 0 && sum/float64(counted) >= l.cfg.DesiredUtilizationRatio:
		l.setLocked(before + step(before, l.cfg.ScaleUpStepRatio))
	}
	l.changedLocked(before)
}

// step is ceil(current × ratio), at least one.
func step(current int, ratio float64) int {
	return max(1, int(math.Ceil(float64(current)*ratio)))
}

// Run samples the polled signals and evaluates them every interval until
// ctx ends. It returns at once outside load-signal mode: fixed and AIMD
// limiters run no loop.
func (l *Limiter) Run(ctx context.Context) error {
	if l.mode != ModeLoadSignal {
		return nil
	}
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case <-t.C:
		}
		now := l.now()
		for _, s := range l.cfg.Signals {
			s.poll(now)
		}
		l.Evaluate(now)
	}
}
