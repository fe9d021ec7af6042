package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
)

// The concurrency modes a service can end in (Concurrency.Mode).
const (
	ConcurrencyNone       = "none"
	ConcurrencyFixed      = "fixed"
	ConcurrencyAIMD       = "aimd"
	ConcurrencyLoadSignal = "load-signal"
)

// AdaptiveSignals are the load signals adaptive_concurrency.signals may name.
var AdaptiveSignals = []string{"cpu", "memory", "scheduler", "backend"}

var adaptiveModes = []string{ConcurrencyAIMD, ConcurrencyLoadSignal}

// StatusSocketOff is the status_socket value that opens no status socket.
const StatusSocketOff = "off"

// DefaultAdaptive returns the defaults of an adaptive_concurrency block,
// which apply field by field to the fields a block leaves unset: the
// limiter's own (limiter.DefaultConfig), except Max, whose 0 lets
// max_concurrent be the ceiling when it is set.
func DefaultAdaptive() Adaptive {
	d := limiter.DefaultConfig()
	return Adaptive{
		Enabled:                 true,
		Mode:                    string(d.Mode),
		Min:                     d.Min,
		IncreaseAfterSuccesses:  d.IncreaseAfterSuccesses,
		DecreaseFactor:          d.DecreaseFactor,
		Interval:                d.Interval,
		Window:                  d.Window,
		ScaleUpStepRatio:        d.ScaleUpStepRatio,
		ScaleDownStepRatio:      d.ScaleDownStepRatio,
		DesiredUtilizationRatio: d.DesiredUtilizationRatio,
		MinSamples:              d.MinSamples,
		Signals:                 slices.Clone(AdaptiveSignals),
	}
}

// StatusDir is the directory in which running clients open their status
// sockets by default, one per process (PID.sock): the user's runtime
// directory when set, else the temporary directory, in aperio-client-UID.
func StatusDir() string {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, "aperio-client-"+strconv.Itoa(os.Getuid()))
}

// adaptiveSettings is the table of the adaptive_concurrency block, top
// level; serviceAdaptiveSettings is the same without environment or flag
// spellings, for entries of services:.
func adaptiveSettings() []setting[Adaptive] {
	type A = Adaptive
	return []setting[A]{
		boolSetting("adaptive_concurrency", "learn each service's concurrency limit from its backend", func(c *A) *bool { return &c.Enabled }),
		enumSetting("adaptive_concurrency.mode", "aimd or load-signal", func(c *A) *string { return &c.Mode }).oneOf(adaptiveModes),
		intSetting("adaptive_concurrency.min", "lowest learnt limit", func(c *A) *int { return &c.Min }),
		intSetting("adaptive_concurrency.max", "ceiling of the learnt limit (max_concurrent wins when set; 0 = 100)", func(c *A) *int { return &c.Max }),
		intSetting("adaptive_concurrency.initial", "first limit (0 = min)", func(c *A) *int { return &c.Initial }),
		intSetting("adaptive_concurrency.increase_after_successes", "aimd: successes that raise the limit by one", func(c *A) *int { return &c.IncreaseAfterSuccesses }),
		floatSetting("adaptive_concurrency.decrease_factor", "aimd: factor applied to the limit on a failure, in (0,1]", func(c *A) *float64 { return &c.DecreaseFactor }),
		durationSetting("adaptive_concurrency.interval", "load-signal: time between evaluations", func(c *A) *time.Duration { return &c.Interval }),
		durationSetting("adaptive_concurrency.window", "load-signal: how far back snapshots count", func(c *A) *time.Duration { return &c.Window }),
		floatSetting("adaptive_concurrency.scale_up_step_ratio", "load-signal: rise as a share of the limit", func(c *A) *float64 { return &c.ScaleUpStepRatio }),
		floatSetting("adaptive_concurrency.scale_down_step_ratio", "load-signal: fall as a share of the limit", func(c *A) *float64 { return &c.ScaleDownStepRatio }),
		floatSetting("adaptive_concurrency.desired_utilization_ratio", "load-signal: healthy ratio at which the limit rises", func(c *A) *float64 { return &c.DesiredUtilizationRatio }),
		intSetting("adaptive_concurrency.min_samples", "load-signal: snapshots a signal needs to count", func(c *A) *int { return &c.MinSamples }),
		listSetting("adaptive_concurrency.signals", "load-signal: cpu, memory, scheduler, backend (comma list)", func(c *A) *[]string { return &c.Signals }, strings.ToLower),
	}
}

func serviceAdaptiveSettings() []setting[Adaptive] {
	tab := adaptiveSettings()
	for i := range tab {
		tab[i].Env, tab[i].Flag = "", ""
	}
	return tab
}

// ResolveConcurrency fills Services[i].Concurrency where it is still zero
// (a Client built by hand), with every source ranked equal. LoadClient
// resolves with the sources instead.
func (c *Client) ResolveConcurrency() {
	for i := range c.Services {
		if c.Services[i].Concurrency.Mode == "" {
			c.Services[i].Concurrency = c.resolve(i, func(string) int { return 0 })
		}
	}
}

// resolve decides service i's limit. The more specific setting wins: a
// service's own adaptive block or max_concurrent over the client's. Between
// the client's max_concurrent and its adaptive block, the one set on the
// higher-ranked surface (flag > file > environment > home file) wins, as a
// later call wins in code: a flag --max-concurrent pins a service the file
// made adaptive; otherwise the block is adaptive, with max_concurrent as
// its ceiling. rank gives a key's surface rank.
func (c *Client) resolve(i int, rank func(key string) int) Concurrency {
	s := &c.Services[i]
	p := fmt.Sprintf("services[%d].", i)
	ceiling := func(a *Adaptive, why string) Concurrency {
		if a.Mode == ConcurrencyLoadSignal && len(a.Signals) == 0 {
			why += "; no signals, so it runs as aimd (10 / 0.5)"
		}
		eff, _ := a.withFallbacks("")
		out := Concurrency{Mode: a.Mode, Adaptive: eff, Limit: a.Max, Why: why}
		switch {
		case s.MaxConcurrent > 0:
			out.Limit, out.Why = s.MaxConcurrent, why+"; ceiling "+p+"max_concurrent"
		case c.MaxConcurrent > 0:
			out.Limit, out.Why = c.MaxConcurrent, why+"; ceiling max_concurrent"
		case a.Max > 0:
			out.Why = why + "; ceiling adaptive_concurrency.max"
		default:
			out.Why = why + "; ceiling default " + strconv.Itoa(limiter.DefaultMax)
		}
		return out
	}
	if a := s.Adaptive; a != nil && a.Enabled {
		return ceiling(a, p+"adaptive_concurrency is set")
	}
	off := s.Adaptive != nil // the service switched the client's block off
	if s.MaxConcurrent > 0 {
		why := p + "max_concurrent is set"
		if a := c.Adaptive; a != nil && a.Enabled && !off {
			why += " and is more specific than adaptive_concurrency"
		}
		return Concurrency{Mode: ConcurrencyFixed, Limit: s.MaxConcurrent, Why: why}
	}
	a := c.Adaptive
	if a != nil && a.Enabled && !off {
		if c.MaxConcurrent > 0 && rank("max_concurrent") > adaptiveRank(rank) {
			return Concurrency{Mode: ConcurrencyFixed, Limit: c.MaxConcurrent, Why: "max_concurrent is set on a surface above adaptive_concurrency"}
		}
		return ceiling(a, "adaptive_concurrency is set")
	}
	if c.MaxConcurrent > 0 {
		why := "max_concurrent is set"
		if off {
			why += "; " + p + "adaptive_concurrency is off"
		}
		return Concurrency{Mode: ConcurrencyFixed, Limit: c.MaxConcurrent, Why: why}
	}
	return Concurrency{Mode: ConcurrencyNone, Why: "neither max_concurrent nor adaptive_concurrency is set: no limit announced"}
}

// withFallbacks returns a with the values that fall back instead of
// stopping startup replaced, and one warning per replaced value, its key
// under prefix: increase_after_successes below 1 counts as 1 (the streak
// is at least one success), and decrease_factor outside (0, 1] as 0.5.
// An explicit 0 falls back like any other value out of range: the zero of
// a loaded block is never "the default", which the loader fills in.
func (a Adaptive) withFallbacks(prefix string) (Adaptive, []string) {
	var warnings []string
	k := prefix + "adaptive_concurrency."
	if a.IncreaseAfterSuccesses < 1 {
		warnings = append(warnings, fmt.Sprintf("%sincrease_after_successes: %d is below 1, using 1", k, a.IncreaseAfterSuccesses))
		a.IncreaseAfterSuccesses = 1
	}
	if !(a.DecreaseFactor > 0 && a.DecreaseFactor <= 1) {
		warnings = append(warnings, fmt.Sprintf("%sdecrease_factor: %g is outside (0, 1], using 0.5", k, a.DecreaseFactor))
		a.DecreaseFactor = 0.5
	}
	return a, warnings
}

// ClientWarnings returns what is accepted in c but not used as written, one
// line each, for --check-config to print and the client to log at startup:
// today the adaptive_concurrency values that fall back (withFallbacks), of
// the client's block and of each service's. An empty result means nothing
// to warn about.
func ClientWarnings(c Client) []string {
	var w []string
	if a := c.Adaptive; a != nil && a.Enabled {
		_, ws := a.withFallbacks("")
		w = append(w, ws...)
	}
	for i, s := range c.Services {
		if a := s.Adaptive; a != nil && a.Enabled {
			_, ws := a.withFallbacks(fmt.Sprintf("services[%d].", i))
			w = append(w, ws...)
		}
		if s.TLSInsecureSkipVerify {
			w = append(w, fmt.Sprintf("services[%d].tls_insecure_skip_verify is on: the certificate of %s is not verified, anyone on the path to it can read and change its traffic", i, s.Target))
		}
	}
	return w
}

// adaptiveRank is the highest surface rank among the keys of the client's
// adaptive block.
func adaptiveRank(rank func(string) int) int {
	best := 0
	for _, s := range adaptiveSettings() {
		best = max(best, rank(s.Name))
	}
	return best
}

// sourceRank ranks a surface by client precedence: flag and argument 4,
// the file 3, the environment 2, the home file 1, a default 0.
func sourceRank(src Source, homeFile string) int {
	switch src.Kind {
	case SourceFlag, SourceArg:
		return 4
	case SourceFile:
		if homeFile != "" && src.Name == homeFile {
			return 1
		}
		return 3
	case SourceEnv:
		return 2
	}
	return 0
}

// adaptive checks one adaptive block under prefix ("" or "services[N].").
// decrease_factor and increase_after_successes are not checked: out of
// range they fall back with a warning (withFallbacks, ClientWarnings), as
// documented.
func (v *checker) adaptive(prefix string, a *Adaptive) {
	if a == nil {
		return
	}
	k := prefix + "adaptive_concurrency."
	v.oneOf(k+"mode", a.Mode, adaptiveModes)
	v.nonNegative(k+"min", int64(a.Min))
	v.nonNegative(k+"max", int64(a.Max))
	v.nonNegative(k+"initial", int64(a.Initial))
	if a.Max > 0 && a.Max < a.Min {
		v.add(k+"max", "%d is below %smin %d", a.Max, k, a.Min)
	}
	v.positive(k+"interval", a.Interval)
	v.positive(k+"window", a.Window)
	for _, r := range []struct {
		key string
		val float64
	}{{"scale_up_step_ratio", a.ScaleUpStepRatio}, {"scale_down_step_ratio", a.ScaleDownStepRatio}, {"desired_utilization_ratio", a.DesiredUtilizationRatio}} {
		if !(r.val > 0 && r.val <= 1) {
			v.add(k+r.key, "%g is outside (0, 1]", r.val)
		}
	}
	if a.MinSamples < 1 {
		v.add(k+"min_samples", "must be at least 1, got %d", a.MinSamples)
	}
	for _, s := range a.Signals {
		if !slices.Contains(AdaptiveSignals, s) {
			v.add(k+"signals", "unknown signal %q (%s)", s, strings.Join(AdaptiveSignals, ", "))
		}
	}
}

// printConcurrency writes the line that says which mode a service ended
// in and why.
func (p *printer) concurrency(prefix string, c Concurrency) {
	if p.err != nil {
		return
	}
	val := c.Mode
	switch c.Mode {
	case ConcurrencyFixed:
		val += " " + strconv.Itoa(c.Limit)
	case ConcurrencyAIMD, ConcurrencyLoadSignal:
		limit := c.Limit
		if limit == 0 {
			limit = limiter.DefaultMax
		}
		val += fmt.Sprintf(" min %d max %d", max(c.Adaptive.Min, limiter.DefaultMin), limit)
	}
	_, p.err = fmt.Fprintf(p.w, "%sconcurrency = %s  # %s\n", prefix, strconv.Quote(val), c.Why)
}
