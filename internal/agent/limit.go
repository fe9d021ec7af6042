package agent

import (
	"time"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/logkey"
)

// minAnnounceGap spaces the announcements that carry a changed limit: a
// limit can move on every request, the server needs to hear of it promptly
// but not once per request.
const minAnnounceGap = 250 * time.Millisecond

// newLimiter builds the limiter of one service from its resolved
// concurrency; nil for mode none.
func (a *Agent) newLimiter(id string, c config.Concurrency) (*limiter.Limiter, error) {
	cfg := limiter.Config{
		Name:     id,
		Logger:   a.log,
		OnChange: func(limiter.Snapshot) { a.signalLimit() },
	}
	switch c.Mode {
	case config.ConcurrencyNone, "":
		return nil, nil
	case config.ConcurrencyFixed:
		cfg.Mode, cfg.Fixed = limiter.ModeFixed, c.Limit
		return limiter.New(cfg)
	}
	ad := c.Adaptive
	cfg.Mode = limiter.Mode(c.Mode)
	cfg.Min, cfg.Max, cfg.Initial = ad.Min, c.Limit, ad.Initial
	cfg.IncreaseAfterSuccesses, cfg.DecreaseFactor = ad.IncreaseAfterSuccesses, ad.DecreaseFactor
	cfg.Interval, cfg.Window = ad.Interval, ad.Window
	cfg.ScaleUpStepRatio, cfg.ScaleDownStepRatio = ad.ScaleUpStepRatio, ad.ScaleDownStepRatio
	cfg.DesiredUtilizationRatio, cfg.MinSamples = ad.DesiredUtilizationRatio, ad.MinSamples
	if cfg.Mode == limiter.ModeLoadSignal {
		cfg.Signals, cfg.Backend = a.signals(id, ad)
	}
	l, err := limiter.New(cfg)
	// A learnt limit is worth a line at startup: where the service starts
	// and why it learns at all (the changes themselves are debug events).
	if err == nil {
		s := l.Snapshot()
		a.log.Info("concurrency limit", logkey.Service, id, logkey.Mode, string(s.Mode), logkey.Desired, s.Desired, logkey.Min, s.Min, logkey.Max, s.Max, logkey.Why, c.Why)
	}
	return l, err
}

// signals builds the load signals a block names. A system signal the
// platform lacks is left out with a warning; with none left, the limiter
// falls back to AIMD.
func (a *Agent) signals(id string, ad config.Adaptive) ([]*limiter.Signal, *limiter.Signal) {
	var out []*limiter.Signal
	var backend *limiter.Signal
	for _, name := range ad.Signals {
		var s *limiter.Signal
		var err error
		switch name {
		case limiter.SignalCPU:
			s, err = limiter.NewCPUSignal()
		case limiter.SignalMemory:
			s, err = limiter.NewMemorySignal()
		case limiter.SignalScheduler:
			s = limiter.NewSchedulerSignal(ad.Interval)
		case limiter.SignalBackend:
			backend = limiter.NewBackendSignal()
			s = backend
		}
		if err != nil {
			a.log.Warn("load signal unavailable", logkey.Service, id, logkey.Signal, name, logkey.Err, err)
			continue
		}
		if s != nil {
			out = append(out, s)
		}
	}
	return out, backend
}

func (a *Agent) signalLimit() {
	select {
	case a.limitChange <- struct{}{}:
	default:
	}
}
