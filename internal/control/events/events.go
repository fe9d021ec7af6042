// Package events owns the one path by which the server reports what
// happened: Emitter.Emit appends the event's audit entry and hands the
// event to webhook delivery, so that the audit log and the webhooks never
// disagree about what was emitted. It also samples the events a visitor
// can cause at will (auth_denied), and offers a queue for callers on a
// hot path that must not wait for the audit write.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
)

// Event is one thing that happened, as both the audit log and webhooks
// see it.
type Event struct {
	// Kind is one of apitype.WebhookEvents; other kinds are audited and not
	// delivered to webhooks, since no subscription can name them.
	Kind string
	// At is when it happened; zero means the Emitter's clock at Emit.
	At time.Time
	// OrgID is the organization concerned; "" for server-wide events
	// (config_reloaded), which no webhook receives.
	OrgID string
	// Actor names who did it (store.Actor: "master", "key:ID",
	// "token:ID", "server", "visitor", …).
	Actor store.Actor
	// Hostname and Path name the hostname and bind path concerned, if
	// any.
	Hostname, Path string
	// Detail is the audit entry's free text, also sent to webhooks as the
	// payload's detail.summary.
	Detail string
	// Fields are the kind's own payload fields for webhooks, beside
	// actor and summary (docs/webhooks.md lists them). Nil means none.
	// The values must encode as JSON.
	Fields map[string]any
	// Data, when set, is the kind's own typed payload, which the sink
	// encodes in place of the generic one (Scaling for the scaling
	// kinds, webhook.MaintenanceEvent for maintenance). Nil means
	// the generic payload.
	Data any
}

// Auditor appends audit entries. *store.DB implements it.
type Auditor interface {
	AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
}

// Sink receives each event after its audit entry has been written (or
// failed to be). Publish must not block: it queues or drops. It must be
// safe for concurrent use. *webhook.Dispatcher implements it.
type Sink interface {
	Publish(e Event)
}

// Defaults.
const (
	// DefaultAuditTimeout bounds one audit append.
	DefaultAuditTimeout = 5 * time.Second
	// DefaultQueue bounds the events Offer holds for Run.
	DefaultQueue = 256
	// DefaultSampleInterval is the interval of auth_denied sampling: at
	// most one event per organization and hostname in each.
	DefaultSampleInterval = 10 * time.Second
	// maxSampleKeys bounds the organization and hostname pairs the
	// sampler remembers; beyond it, pairs are refused (counted) until the
	// next sweep of expired ones, so a visitor inventing hostnames cannot
	// grow it.
	maxSampleKeys = 10_000
	// maxDetailBytes bounds a sampled event's detail, which carries the
	// visitor's path.
	maxDetailBytes = 1024
)

// Config configures an Emitter. Every field is optional.
type Config struct {
	// Audit receives the audit entries; nil writes none (tests of a
	// component that only deliver).
	Audit Auditor
	// Sink receives every event after its audit entry; nil delivers
	// none.
	Sink Sink
	// Logger receives lost audit entries at Error and dropped queued
	// events at Warn; nil discards them.
	Logger *slog.Logger
	// Now is the clock of At and of sampling; nil means time.Now.
	Now func() time.Time
	// AuditTimeout bounds each audit append; 0 means
	// DefaultAuditTimeout.
	AuditTimeout time.Duration
	// Queue bounds the events Offer holds for Run; 0 means DefaultQueue.
	Queue int
	// SampleInterval is the auth_denied sampling interval; 0 means
	// DefaultSampleInterval.
	SampleInterval time.Duration
}

// Emitter is the server's one emit path. It is safe for concurrent use.
// Emit writes synchronously; Offer queues for Run, which its owner runs
// for the server's lifetime. Create it with New.
type Emitter struct {
	cfg     Config
	log     *slog.Logger
	queue   chan Event
	dropped atomic.Int64 // events Offer dropped on a full queue, ever
	unsaid  atomic.Int64 // of them, not yet reported in an audit entry
	sample  sampler
}

// New returns an Emitter for cfg, with defaults applied. Nothing in cfg
// can be wrong: a negative duration or bound means its default.
func New(cfg Config) *Emitter {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuditTimeout <= 0 {
		cfg.AuditTimeout = DefaultAuditTimeout
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	return &Emitter{
		cfg:    cfg,
		log:    cfg.Logger,
		queue:  make(chan Event, cfg.Queue),
		sample: sampler{every: cfg.SampleInterval, last: make(map[sampleKey]*sampleState)},
	}
}

// Emit appends ev's audit entry, then publishes ev to the sink. It blocks
// for the append, at most AuditTimeout, and the append outlives ctx's
// cancellation: a change that happened is recorded even when its caller
// has gone. A failed append is logged, and ev is still published. An
// auth_denied event is sampled first (see Offer); one left out returns
// at once, counted in the next one's "suppressed" field.
func (em *Emitter) Emit(ctx context.Context, ev Event) {
	if ev.Kind == apitype.EventAuthDenied {
		var ok bool
		if ev, ok = em.admit(ev); !ok {
			return
		}
	}
	em.emit(ctx, ev)
}

// emit is Emit after sampling.
func (em *Emitter) emit(ctx context.Context, ev Event) {
	if ev.At.IsZero() {
		ev.At = em.cfg.Now()
	}
	if em.cfg.Audit != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), em.cfg.AuditTimeout)
		_, err := em.cfg.Audit.AppendAudit(actx, store.AuditEntry{
			At: ev.At, OrgID: ev.OrgID, Event: ev.Kind, Actor: ev.Actor, Hostname: ev.Hostname, Detail: ev.Detail,
		})
		cancel()
		if err != nil {
			em.log.Error("audit entry lost", logkey.Event, ev.Kind, logkey.Actor, ev.Actor, logkey.OrgID, ev.OrgID, logkey.Err, err)
		}
	}
	if em.cfg.Sink != nil {
		em.cfg.Sink.Publish(ev)
	}
}

// Offer queues ev for Run to emit, and never blocks: it is for callers on
// a request or handshake path. An auth_denied event is sampled here, before
// it takes a place in the queue: at most one per organization and hostname
// each SampleInterval, the rest counted and reported in the next admitted
// one (Fields "suppressed", and the detail). When the queue is full, ev is
// dropped, counted in Dropped, and the next entry Run writes says how many
// were dropped. It reports whether ev was queued.
func (em *Emitter) Offer(ev Event) bool {
	if ev.Kind == apitype.EventAuthDenied {
		var ok bool
		if ev, ok = em.admit(ev); !ok {
			return false
		}
	}
	if ev.At.IsZero() {
		ev.At = em.cfg.Now()
	}
	select {
	case em.queue <- ev:
		return true
	default:
		em.dropped.Add(1)
		if em.unsaid.Add(1) == 1 { // once per overflow, until Run reports it
			em.log.Warn("event queue full, dropping events", logkey.Event, ev.Kind, logkey.OrgID, ev.OrgID)
		}
		return false
	}
}

// Dropped returns how many events Offer has dropped on a full queue since
// New.
func (em *Emitter) Dropped() int64 { return em.dropped.Load() }

// Run emits the events Offer queued, one at a time, until ctx ends; those
// still queued then are abandoned. It returns nil.
func (em *Emitter) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-em.queue:
			if n := em.unsaid.Swap(0); n > 0 {
				ev.Detail += fmt.Sprintf(" (%d events not audited: the event queue was full)", n)
			}
			em.emit(ctx, ev)
		}
	}
}

// admit samples an auth_denied event: it returns ev, with the count of
// those left out since the last admitted one of its organization and
// hostname, and whether ev is admitted.
func (em *Emitter) admit(ev Event) (Event, bool) {
	n, ok := em.sample.admit(sampleKey{ev.OrgID, ev.Hostname}, em.cfg.Now())
	if !ok {
		return ev, false
	}
	if len(ev.Detail) > maxDetailBytes {
		ev.Detail = ev.Detail[:maxDetailBytes] + "…"
	}
	if n > 0 {
		ev.Detail += fmt.Sprintf(" (%d more refusals since the last entry, not audited)", n)
		f := make(map[string]any, len(ev.Fields)+1)
		for k, v := range ev.Fields {
			f[k] = v
		}
		f["suppressed"] = n
		ev.Fields = f
	}
	return ev, true
}

type sampleKey struct{ org, host string }

type sampleState struct {
	at         time.Time // when the last event was admitted
	suppressed int64     // left out since
}

// sampler admits one event per key per interval.
type sampler struct {
	every time.Duration

	mu   sync.Mutex // guards the following fields
	last map[sampleKey]*sampleState
	// refused counts events refused for want of room; the next new key
	// admitted reports them as its own.
	refused int64
	swept   time.Time // when the keys were last swept
}

// admit reports whether an event for k at now is admitted, and if so how
// many were left out before it.
func (s *sampler) admit(k sampleKey, now time.Time) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[k]
	if ok {
		if now.Sub(st.at) < s.every {
			st.suppressed++
			return 0, false
		}
		n := st.suppressed
		st.at, st.suppressed = now, 0
		return n, true
	}
	if len(s.last) >= maxSampleKeys && now.Sub(s.swept) >= s.every {
		// Sweep the keys whose interval is over and that have nothing to
		// report (a key with a count waits to report it); at most once an
		// interval, so that a flood of new keys costs no sweep each.
		s.swept = now
		for key, v := range s.last {
			if now.Sub(v.at) >= s.every && v.suppressed == 0 {
				delete(s.last, key)
			}
		}
	}
	if len(s.last) >= maxSampleKeys {
		s.refused++
		return 0, false
	}
	s.last[k] = &sampleState{at: now}
	n := s.refused
	s.refused = 0
	return n, true
}
