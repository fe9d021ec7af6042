package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/internal/visitor/usage"
	"github.com/aperio-dev/aperio/store"
)

// Bounds of Config.UsageFlushInterval (usage_flush_interval) when it is
// not 0: a flush is a store transaction and a read of the totals, so not
// more than once a second; and the quotas of servers sharing a database
// are judged from each other's flushes, so not rarer than every 5
// minutes.
const (
	MinUsageFlushInterval = time.Second
	MaxUsageFlushInterval = 5 * time.Minute
)

// EventQuotaExceeded is the audit event of a token reaching its
// daily_max_bytes or an organization its monthly_max_bytes.
const EventQuotaExceeded = "quota_exceeded"

// Bounds of the usage limits cache.
const (
	// maxUsageLimits bounds the tokens and the organizations whose quotas
	// are cached (each apart); beyond it an entry is evicted and read
	// again when next asked for.
	maxUsageLimits = 100_000
	// usageMissQueue bounds the quotas waiting to be read after a miss;
	// a miss beyond it is dropped and asked for again at the next flush.
	usageMissQueue = 1024
	// usageReadTimeout bounds one read of a token's or organization's
	// quota.
	usageReadTimeout = 5 * time.Second
	// tokenBytesLabels bounds the token label of aperio_token_bytes_total:
	// the first tokens seen get a series of their own, every later one is
	// summed under token="other", so the series stay few and monotonic.
	// A top-N by bytes would move tokens in and out of other, and a
	// counter must never go down.
	tokenBytesLabels = 100
	// tokenLabelOther is the token label of every token past
	// tokenBytesLabels.
	tokenLabelOther = "other"
)

// usageLimits is the meter's view of the quotas (usage.Limits): each
// token's daily_max_bytes and each organization's monthly_max_bytes, kept
// in memory so that the meter never waits for the store. A token's entry
// is filled when one of its tunnels authenticates (every token that
// carries traffic here has one), an organization's when such a tunnel is
// admitted; the change feed refreshes both (token edits, organization
// limits, a resync). A quota asked for and not cached reads as none and is
// read off the request path, in time for the next flush. Safe for
// concurrent use.
type usageLimits struct {
	db  *store.DB
	log *slog.Logger

	mu     sync.Mutex // guards the following fields
	tokens map[string]tokenQuota
	orgs   map[string]int64
	wanted map[usageMiss]bool // queued in misses

	misses chan usageMiss
}

// tokenQuota is a token's cached quota and its organization.
type tokenQuota struct {
	org   string
	daily int64
}

// usageMiss names a quota to read: a token's, or an organization's.
type usageMiss struct {
	org bool
	id  string
}

func newUsageLimits(db *store.DB, log *slog.Logger) *usageLimits {
	return &usageLimits{db: db, log: log, tokens: map[string]tokenQuota{}, orgs: map[string]int64{},
		wanted: map[usageMiss]bool{}, misses: make(chan usageMiss, usageMissQueue)}
}

// TokenDailyMax is the token's daily_max_bytes, 0 for none or the master
// token ("").
func (l *usageLimits) TokenDailyMax(id string) int64 {
	if id == "" {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if q, ok := l.tokens[id]; ok {
		return q.daily
	}
	l.missLocked(usageMiss{id: id})
	return 0
}

// OrgMonthlyMax is the organization's monthly_max_bytes, 0 for none.
func (l *usageLimits) OrgMonthlyMax(id string) int64 {
	if id == "" {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.orgs[id]; ok {
		return v
	}
	l.missLocked(usageMiss{org: true, id: id})
	return 0
}

// missLocked queues m for the reader unless it is queued already or the
// queue is full. It never blocks: the meter may hold its lock.
func (l *usageLimits) missLocked(m usageMiss) {
	if l.wanted[m] {
		return
	}
	select {
	case l.misses <- m:
		l.wanted[m] = true
	default:
	}
}

// token returns the cached organization and daily_max_bytes of a token.
func (l *usageLimits) token(id string) (tokenQuota, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q, ok := l.tokens[id]
	return q, ok
}

func (l *usageLimits) org(id string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.orgs[id]
}

// setToken caches t's quota. A nil l (no meter) keeps nothing.
func (l *usageLimits) setToken(t store.Token) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	putBounded(l.tokens, t.ID, tokenQuota{org: t.OrgID, daily: t.Limits.DailyMaxBytes})
}

// setOrg caches o's quota. A nil l keeps nothing.
func (l *usageLimits) setOrg(o store.Org) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	putBounded(l.orgs, o.ID, o.Limits.MonthlyMaxBytes)
}

// putBounded sets m[k], first evicting an arbitrary entry when k is new
// and m holds maxUsageLimits: the evicted quota is read again when next
// asked for.
func putBounded[V any](m map[string]V, k string, v V) {
	if _, ok := m[k]; !ok && len(m) >= maxUsageLimits {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// load reads m's quota from the store into the cache. A token or
// organization gone from the store is forgotten (it limits nothing it can
// still serve); a failed read keeps what was cached.
func (l *usageLimits) load(ctx context.Context, m usageMiss) {
	ctx, cancel := context.WithTimeout(ctx, usageReadTimeout)
	defer cancel()
	var err error
	if m.org {
		var o store.Org
		if o, err = l.db.Org(ctx, m.id); err == nil {
			l.setOrg(o)
		}
	} else {
		var t store.Token
		if t, err = l.db.Token(ctx, "", m.id); err == nil {
			l.setToken(t)
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		l.mu.Lock()
		if m.org {
			delete(l.orgs, m.id)
		} else {
			delete(l.tokens, m.id)
		}
		l.mu.Unlock()
	case err != nil && m.org:
		l.log.Warn("usage quota unreadable: the cached one stays until the next change", logkey.OrgID, m.id, logkey.Err, err)
	case err != nil:
		l.log.Warn("usage quota unreadable: the cached one stays until the next change", logkey.TokenID, m.id, logkey.Err, err)
	}
}

// refresh re-reads m's quota if it is cached: what the change feed calls
// on an edit, so that quotas never asked for here are not read.
func (l *usageLimits) refresh(ctx context.Context, m usageMiss) {
	if l == nil {
		return
	}
	l.mu.Lock()
	var cached bool
	if m.org {
		_, cached = l.orgs[m.id]
	} else {
		_, cached = l.tokens[m.id]
	}
	l.mu.Unlock()
	if cached {
		l.load(ctx, m)
	}
}

// reloadAll re-reads every cached quota, after a resync of the change
// feed (changes may have been missed).
func (l *usageLimits) reloadAll(ctx context.Context) {
	if l == nil {
		return
	}
	var all []usageMiss
	l.mu.Lock()
	for id := range l.tokens {
		all = append(all, usageMiss{id: id})
	}
	for id := range l.orgs {
		all = append(all, usageMiss{org: true, id: id})
	}
	l.mu.Unlock()
	for _, m := range all {
		if ctx.Err() != nil {
			return
		}
		l.load(ctx, m)
	}
}

// run reads the quotas that missed until ctx ends.
func (l *usageLimits) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-l.misses:
			l.load(ctx, m)
			l.mu.Lock()
			delete(l.wanted, m)
			l.mu.Unlock()
		}
	}
}

// metering is usage accounting on this server: the meter counting
// visitor bytes per token, organization and bind over the store, the
// quotas it enforces (limits), and the audit of every quota first
// reached (quotaExceeded).
type metering struct {
	meter  *usage.Meter
	limits *usageLimits
	db     *store.DB
	events *events.Emitter
	log    *slog.Logger
}

// newMetering creates the usage meter over db, with the quotas db holds.
func newMetering(cfg Config, db *store.DB, ev *events.Emitter, log *slog.Logger) (*metering, error) {
	mt := &metering{limits: newUsageLimits(db, log), db: db, events: ev, log: log}
	m, err := usage.New(usage.Config{Store: meterStore{db}, Limits: mt.limits, FlushInterval: cfg.UsageFlushInterval,
		Exceeded: mt.quotaExceeded, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	mt.meter = m
	return mt, nil
}

// run runs the meter's flushes and the quota reader until ctx ends;
// the meter flushes once more then, so that a shutdown loses nothing the
// store takes. Serve cancels ctx after the visitors' requests finished.
func (mt *metering) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		defer recovery.Recover(mt.log, "usage limits")
		mt.limits.run(ctx)
	})
	mt.meter.Run(ctx)
	wg.Wait()
}

// quotaExceeded audits quota_exceeded for a token over its daily_max_bytes
// (kind "token") or an organization over its monthly_max_bytes ("org").
// The meter calls it once per period on this server; servers sharing the
// store skip an entry another one wrote for the same period first (a
// check, not a claim: two flushing at the same instant may both write).
func (mt *metering) quotaExceeded(ctx context.Context, kind, id string) {
	// The meter's flusher calls this: a panic here must not end the
	// flushes, nor the server.
	defer recovery.Recover(mt.log, "quota exceeded audit")
	now := time.Now().UTC()
	var org, setting string
	var limit int64
	var since time.Time
	switch kind {
	case "token":
		q, _ := mt.limits.token(id)
		org, setting, limit = q.org, "daily_max_bytes", q.daily
		since = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	default:
		org, setting, limit = id, "monthly_max_bytes", mt.limits.org(id)
		since = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	// The entry's detail opens with its subject (events.QuotaExceeded
	// writes "token ID …" or "organization ID …"): how a server finds
	// the entry another one wrote.
	subject, tokenID, used := "organization "+id+" ", "", limit
	if kind == "token" {
		subject, tokenID, used = "token "+id+" ", id, max(limit, mt.meter.TokenUsed(id))
	}
	ctx, cancel := context.WithTimeout(ctx, usageReadTimeout)
	defer cancel()
	prior, err := mt.db.QueryAudit(ctx, store.AuditQuery{OrgID: org, Event: EventQuotaExceeded, Since: since, Limit: store.MaxAuditLimit})
	if err != nil {
		mt.log.Error("audit read failed", logkey.Event, EventQuotaExceeded, logkey.Err, err)
	}
	for _, e := range prior {
		if strings.HasPrefix(e.Detail, subject) {
			return // another server wrote it
		}
	}
	// One emit path: audited, then delivered to quota_exceeded webhooks.
	mt.events.Emit(ctx, events.QuotaExceeded(events.Quota{OrgID: org, TokenID: tokenID, Limit: setting, UsedBytes: used, MaxBytes: limit, At: now}))
}

// meterStore adapts the store's usage calls to usage.Store.
type meterStore struct{ db *store.DB }

func (s meterStore) AddUsage(ctx context.Context, ds []usage.Delta) error {
	out := make([]store.UsageDelta, len(ds))
	for i, d := range ds {
		out[i] = store.UsageDelta{Day: d.Day, TokenID: d.TokenID, OrgID: d.OrgID, Hostname: d.Hostname, Bytes: d.Bytes, Requests: d.Requests}
	}
	return s.db.AddUsage(ctx, out)
}

func (s meterStore) UsageTotals(ctx context.Context, day, month time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error) {
	return s.db.UsageTotals(ctx, day, month, tokens, orgs)
}

// metricTokenBytes is the visitor bytes per token and direction
// (aperio_token_bytes_total in Prometheus).
const metricTokenBytes = "aperio.token_bytes"

// metricQuotaCuts is the exchanges ended as they crossed a byte quota, by
// limit (aperio_quota_cuts_total in Prometheus).
const metricQuotaCuts = "aperio.quota_cuts"

// tokenLabels gives each token its label of aperio_token_bytes_total:
// its ID (apitype.Master for the master token) for the first
// tokenBytesLabels tokens seen, for good, and tokenLabelOther for every
// later one. A token never moves between its series and other's, so each
// stays monotonic. Not safe for concurrent use.
type tokenLabels map[string]bool

func (l tokenLabels) label(id string) string {
	if id == "" {
		id = apitype.Master
	}
	if !l[id] {
		if len(l) >= tokenBytesLabels {
			return tokenLabelOther
		}
		l[id] = true
	}
	return id
}

// registerMetric exposes the meter's per-token bytes, read at
// collection time: the request path pays nothing for the metric.
func (mt *metering) registerMetric(m metric.Meter) error {
	bytes, err := m.Int64ObservableCounter(metricTokenBytes,
		metric.WithDescription("Visitor bytes through each token's clients (token is the token ID, master for the master token; past the first 100 tokens, other), by direction: in from visitors, out to them."))
	if err != nil {
		return err
	}
	cuts, err := m.Int64ObservableCounter(metricQuotaCuts,
		metric.WithDescription("Requests, streams and public port connections ended as they crossed a byte quota while their bytes flowed, by limit (token-quota, org-quota)."))
	if err != nil {
		return err
	}
	type sums struct{ in, out int64 }
	var mu sync.Mutex // guards labels: two scrapes may collect at once
	labels := tokenLabels{}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		by := map[string]*sums{}
		mt.meter.TokenBytes(func(id string, in, out int64) {
			label := labels.label(id)
			s := by[label]
			if s == nil {
				s = &sums{}
				by[label] = s
			}
			s.in += in
			s.out += out
		})
		for label, s := range by {
			tok := attribute.String("token", label)
			o.ObserveInt64(bytes, s.in, metric.WithAttributes(tok, attribute.String("direction", "in")))
			o.ObserveInt64(bytes, s.out, metric.WithAttributes(tok, attribute.String("direction", "out")))
		}
		tokCuts, orgCuts := mt.meter.QuotaCuts()
		o.ObserveInt64(cuts, tokCuts, metric.WithAttributes(attribute.String("limit", usage.TokenQuota.String())))
		o.ObserveInt64(cuts, orgCuts, metric.WithAttributes(attribute.String("limit", usage.OrgQuota.String())))
		return nil
	}, bytes, cuts)
	return err
}
