// Package usage owns usage accounting and byte quotas: the bytes and
// requests of visitors through each token's clients, per token,
// organization, hostname and UTC day, counted in memory on the request
// path (atomics, no lock, no allocation) and flushed to the store in
// batches as increments, so that several servers sharing PostgreSQL add
// up. It keeps, per token and organization, the store's total of the
// current period (refreshed at each flush) plus what this server has not
// flushed yet, and says when a token is over its daily_max_bytes or an
// organization over its monthly_max_bytes.
//
// Overshoot: a server learns of another server's bytes only once that
// server has flushed them and this one has re-read the totals at its own
// flush, up to two flush intervals after they were served; so servers
// sharing a quota may pass it by at most two flush intervals of their
// combined byte rate. A request, stream or connection is admitted or
// refused as it starts; one that moves much (a long body, a streamed
// response, a WebSocket, a public port's connection) is charged as its
// bytes flow (Counter.Charge, per copy chunk) and ended by its caller
// once a quota is crossed, so that one exchange passes a quota by at
// most one chunk. A server's own counts are judged at once; each server
// enforces from the store's totals plus its own unflushed counts, so N
// servers may together pass a quota by up to N times what each lets
// through between two flushes.
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aperio-dev/aperio/internal/logkey"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFlushInterval is the default of Config.FlushInterval
// (usage_flush_interval).
const DefaultFlushInterval = 5 * time.Second

// DefaultMaxCounters is the default of Config.MaxCounters.
const DefaultMaxCounters = 100_000

// Key names what one counter counts: the token ("" for the master
// token), its organization and the hostname the request was bound by (the
// bind's pattern, so that wildcard binds do not grow one counter per
// visitor-chosen name).
type Key struct {
	TokenID, OrgID, Hostname string
}

// Delta is an increment of one key's usage on one UTC day, as a flush
// writes it.
type Delta struct {
	// Day is the UTC date (midnight) the usage belongs to.
	Day time.Time
	Key
	// Bytes and Requests are added to the stored totals.
	Bytes, Requests int64
}

// Store is what the meter needs of the store. Both calls may fail; the
// meter keeps the counts and retries at the next flush.
type Store interface {
	// AddUsage adds every delta to the stored totals (an increment, never
	// an overwrite), in one transaction.
	AddUsage(ctx context.Context, ds []Delta) error
	// UsageTotals returns the stored bytes of each token of tokens on day
	// and of each organization of orgs in the month starting at month,
	// over every server.
	UsageTotals(ctx context.Context, day, month time.Time, tokens, orgs []string) (map[string]int64, map[string]int64, error)
}

// Limits reads the quotas: 0 (or less) means none. It is called at each
// flush, never on the request path, so a changed limit applies within one
// flush interval.
type Limits interface {
	TokenDailyMax(tokenID string) int64
	OrgMonthlyMax(orgID string) int64
}

// Config configures a Meter. Store is required.
type Config struct {
	Store Store
	// Limits reads the quotas; nil means none.
	Limits Limits
	// FlushInterval is the time between flushes; zero means
	// DefaultFlushInterval.
	FlushInterval time.Duration
	// MaxCounters bounds the counters kept; beyond it a new key is counted
	// under its token and organization with an empty hostname. Zero means
	// DefaultMaxCounters.
	MaxCounters int
	// Exceeded, when set, is called by the flusher (never on the request
	// path) once per token and day, or organization and month, that went
	// over its quota. kind is "token" or "org".
	Exceeded func(ctx context.Context, kind, id string)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives flush failures; nil discards them.
	Logger *slog.Logger
}

// Validate reports every problem with cfg.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("usage: no store"))
	}
	if cfg.FlushInterval < 0 {
		errs = append(errs, fmt.Errorf("usage: usage_flush_interval %v is negative", cfg.FlushInterval))
	}
	if cfg.MaxCounters < 0 {
		errs = append(errs, fmt.Errorf("usage: max counters %d is negative", cfg.MaxCounters))
	}
	return errors.Join(errs...)
}

func (cfg Config) withDefaults() Config {
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.MaxCounters == 0 {
		cfg.MaxCounters = DefaultMaxCounters
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Verdict is what a quota says of a request about to start.
type Verdict uint8

const (
	// Allowed means no quota is used up.
	Allowed Verdict = iota
	// TokenQuota means the token is at or over its daily_max_bytes.
	TokenQuota
	// OrgQuota means the organization is at or over its monthly_max_bytes.
	OrgQuota
	numVerdicts
)

// String returns the verdict's x-aperio-limit kind: "token-quota",
// "org-quota", or "" for Allowed.
func (v Verdict) String() string {
	switch v {
	case TokenQuota:
		return "token-quota"
	case OrgQuota:
		return "org-quota"
	}
	return ""
}

// account is one token's or organization's standing in its quota period.
// limit, base and pending are written by the flusher only; local by the
// request path.
type account struct {
	id      string
	limit   atomic.Int64 // 0 = none
	base    atomic.Int64 // the store's total of the period at the last refresh
	pending atomic.Int64 // swapped out of local, not written to the store yet
	local   atomic.Int64 // counted since the last flush
	// in and out are the visitor bytes each way since New, never reset:
	// the monotonic figures of the aperio_token_bytes_total metric.
	in, out atomic.Int64
	// reported is the period (day or month number + 1) quota_exceeded was
	// reported for; flusher only.
	reported int64
	master   bool // the master token: never limited
}

// over reports whether a is at or over its limit.
func (a *account) over() bool {
	l := a.limit.Load()
	return l > 0 && !a.master && a.base.Load()+a.pending.Load()+a.local.Load() >= l
}

// Used returns the bytes a counts in its period: stored, pending and local.
func (a *account) used() int64 { return a.base.Load() + a.pending.Load() + a.local.Load() }

// Counter counts one Key's usage. Look it up once per request (Meter.Counter)
// and call Check before dispatching, Charge as the bytes of a long
// exchange flow, and Record when the request ends. It is safe for
// concurrent use and never allocates.
type Counter struct {
	key      Key
	bytes    atomic.Int64
	requests atomic.Int64
	tok, org *account
	cuts     *[numVerdicts]atomic.Int64 // the meter's, by the quota that cut an exchange
}

// Check reports whether the counter's token or organization is over its
// quota: two to six atomic loads. The master token's traffic is never
// refused, not even by its organization's monthly_max_bytes (it still
// counts towards it).
func (c *Counter) Check() Verdict {
	if c.tok.master {
		return Allowed
	}
	if c.tok.over() {
		return TokenQuota
	}
	if c.org.over() {
		return OrgQuota
	}
	return Allowed
}

// Record counts one request (or stream, or connection) and the visitor
// bytes of it not charged yet: in from the visitor (its body, or what it
// sent through an upgraded stream) and out to it. A nil Counter records
// nothing. Both must not be negative.
func (c *Counter) Record(in, out int64) {
	if c == nil {
		return
	}
	c.add(in, out)
	c.requests.Add(1)
}

// Limited reports whether the counter's token or organization has a byte
// quota that can refuse it: only then is it worth charging an exchange's
// bytes as they flow. Two or three atomic loads; false for a nil Counter.
func (c *Counter) Limited() bool {
	return c != nil && !c.tok.master && (c.tok.limit.Load() > 0 || c.org.limit.Load() > 0)
}

// Charge counts visitor bytes of an exchange still going (in from the
// visitor, out to it) at once, without counting a request (Record does,
// with the bytes not charged), and reports what the quotas say after
// them: a caller ends the exchange when it is not Allowed. Call it per
// copy chunk, never per byte: it costs a few atomic adds and loads, no
// lock, no allocation. A nil Counter charges nothing and allows.
func (c *Counter) Charge(in, out int64) Verdict {
	if c == nil {
		return Allowed
	}
	c.add(in, out)
	return c.Check()
}

// TryCharge charges in and out visitor bytes of an exchange still going
// when the quotas allow more, and reports whether it did: false, with
// nothing charged, once the token's or the organization's quota is
// reached (by this exchange's earlier bytes or by anyone's). A relay ends
// its exchange without those bytes on false, so that an exchange whose
// bytes reach a quota completes and one with more to move is cut. Per
// copy chunk or datagram, never per byte. A nil Counter allows all.
func (c *Counter) TryCharge(in, out int64) bool {
	if c == nil {
		return true
	}
	if c.Check() != Allowed {
		return false
	}
	c.add(in, out)
	return true
}

// Cut records that an exchange was ended because v (TokenQuota or
// OrgQuota) was crossed while it flowed, for Meter.QuotaCuts. A nil
// Counter records nothing.
func (c *Counter) Cut(v Verdict) {
	if c != nil && v > Allowed && v < numVerdicts {
		c.cuts[v].Add(1)
	}
}

func (c *Counter) add(in, out int64) {
	bytes := in + out
	c.tok.in.Add(in)
	c.tok.out.Add(out)
	c.bytes.Add(bytes)
	c.tok.local.Add(bytes)
	c.org.local.Add(bytes)
}

// counters is an immutable snapshot of the meter's counters.
type counters map[Key]*Counter

// Meter counts usage and enforces quotas. Create it with New, run Run
// for its flushes. It is safe for concurrent use.
type Meter struct {
	cfg  Config
	snap atomic.Pointer[counters]

	mu     sync.Mutex // guards the following fields: new counters and accounts
	tokens map[string]*account
	orgs   map[string]*account

	flushMu sync.Mutex // guards pending: one flush at a time
	pending map[dayKey]*Delta

	flushes, failures atomic.Int64
	cuts              [numVerdicts]atomic.Int64 // exchanges cut as they crossed a quota, by verdict
}

type dayKey struct {
	day int64 // days since the epoch
	Key
}

// New returns a meter for cfg.
func New(cfg Config) (*Meter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Meter{cfg: cfg.withDefaults(), tokens: map[string]*account{}, orgs: map[string]*account{}, pending: map[dayKey]*Delta{}}
	empty := counters{}
	m.snap.Store(&empty)
	return m, nil
}

// Counter returns the counter of (tokenID, orgID, hostname), creating it
// on first use. The common case is one map lookup in an immutable
// snapshot, with no lock and no allocation.
func (m *Meter) Counter(tokenID, orgID, hostname string) *Counter {
	k := Key{TokenID: tokenID, OrgID: orgID, Hostname: hostname}
	if c := (*m.snap.Load())[k]; c != nil {
		return c
	}
	return m.addCounter(k)
}

// addCounter creates k's counter, copying the snapshot: new keys are rare
// (a new bind or token), lookups are not.
func (m *Meter) addCounter(k Key) *Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.snap.Load()
	if c := old[k]; c != nil {
		return c
	}
	if len(old) >= m.cfg.MaxCounters {
		k.Hostname = ""
		if c := old[k]; c != nil {
			return c
		}
	}
	c := &Counter{key: k, tok: m.accountLocked(m.tokens, k.TokenID, m.tokenMax, k.TokenID == ""), org: m.accountLocked(m.orgs, k.OrgID, m.orgMax, false), cuts: &m.cuts}
	next := make(counters, len(old)+1)
	for kk, v := range old {
		next[kk] = v
	}
	next[k] = c
	m.snap.Store(&next)
	return c
}

// accountLocked returns id's account in in, creating it with its limit
// read at once (a new token is limited from its first request; its
// stored total arrives with the next flush). master is set here, once:
// an account is shared by every counter of its token, whose request paths
// read it without a lock.
func (m *Meter) accountLocked(in map[string]*account, id string, limit func(string) int64, master bool) *account {
	a := in[id]
	if a == nil {
		a = &account{id: id, master: master}
		a.limit.Store(limit(id))
		in[id] = a
	}
	return a
}

func (m *Meter) tokenMax(id string) int64 {
	if m.cfg.Limits == nil {
		return 0
	}
	return m.cfg.Limits.TokenDailyMax(id)
}

func (m *Meter) orgMax(id string) int64 {
	if m.cfg.Limits == nil {
		return 0
	}
	return m.cfg.Limits.OrgMonthlyMax(id)
}

// QuotaCuts returns how many exchanges were ended since New because
// they crossed their token's daily_max_bytes and their organization's
// monthly_max_bytes as they flowed (Counter.Cut).
func (m *Meter) QuotaCuts() (token, org int64) {
	return m.cuts[TokenQuota].Load(), m.cuts[OrgQuota].Load()
}

// Flushes returns how many flushes succeeded and failed since New.
func (m *Meter) Flushes() (ok, failed int64) { return m.flushes.Load(), m.failures.Load() }

// TokenUsed returns the bytes a token has used today as this meter
// knows it: the store's total at the last flush plus what this server has
// not flushed.
func (m *Meter) TokenUsed(id string) int64 {
	m.mu.Lock()
	a := m.tokens[id]
	m.mu.Unlock()
	if a == nil {
		return 0
	}
	return a.used()
}

// TokenBytes calls fn with the visitor bytes in and out of every token
// this meter has counted since New ("" is the master token): monotonic
// figures, for a metric read at collection time. fn must not call the
// meter.
func (m *Meter) TokenBytes(fn func(tokenID string, in, out int64)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, a := range m.tokens {
		fn(id, a.in.Load(), a.out.Load())
	}
}

// dayOf returns the days since the epoch of t in UTC, and its midnight.
func dayOf(t time.Time) (int64, time.Time) {
	u := t.UTC()
	d := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	return d.Unix() / 86400, d
}

// monthOf returns the month number of t in UTC and its first day.
func monthOf(t time.Time) (int64, time.Time) {
	u := t.UTC()
	return int64(u.Year())*12 + int64(u.Month()) - 1, time.Date(u.Year(), u.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Flush moves every counter's counts into the pending batch (tagged with
// today's UTC day), writes the batch to the store as increments and, when
// that worked, refreshes each account's stored total and limit. A failed
// write keeps the batch, and the accounts keep counting it, for the next
// flush: visitors are never blocked on it.
func (m *Meter) Flush(ctx context.Context) error {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	now := m.cfg.Now()
	dn, day := dayOf(now)
	mn, month := monthOf(now)
	m.swapLocked(dn, day)
	if len(m.pending) > 0 {
		ds := make([]Delta, 0, len(m.pending))
		for _, d := range m.pending {
			ds = append(ds, *d)
		}
		if err := m.cfg.Store.AddUsage(ctx, ds); err != nil {
			m.failures.Add(1)
			return fmt.Errorf("usage: flush %d deltas: %w", len(ds), err)
		}
		clear(m.pending)
	}
	m.flushes.Add(1)
	toks, orgs := m.accounts()
	return m.refresh(ctx, toks, orgs, day, month, dn, mn)
}

// swapLocked takes every counter's counts into m.pending and the accounts'
// local counts into their pending ones.
func (m *Meter) swapLocked(dn int64, day time.Time) {
	for k, c := range *m.snap.Load() {
		b, r := c.bytes.Swap(0), c.requests.Swap(0)
		if b == 0 && r == 0 {
			continue
		}
		dk := dayKey{day: dn, Key: k}
		d := m.pending[dk]
		if d == nil {
			d = &Delta{Day: day, Key: k}
			m.pending[dk] = d
		}
		d.Bytes += b
		d.Requests += r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, set := range [...]map[string]*account{m.tokens, m.orgs} {
		for _, a := range set {
			a.pending.Add(a.local.Swap(0))
		}
	}
}

func (m *Meter) accounts() (toks, orgs []*account) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.tokens {
		toks = append(toks, a)
	}
	for _, a := range m.orgs {
		orgs = append(orgs, a)
	}
	return toks, orgs
}

// refresh reads the stored totals of the period and the limits, then
// reports the accounts newly over their quota.
func (m *Meter) refresh(ctx context.Context, toks, orgs []*account, day, month time.Time, dn, mn int64) error {
	ids := func(as []*account) []string {
		out := make([]string, 0, len(as))
		for _, a := range as {
			out = append(out, a.id)
		}
		return out
	}
	tt, ot, err := m.cfg.Store.UsageTotals(ctx, day, month, ids(toks), ids(orgs))
	if err != nil {
		return fmt.Errorf("usage: refresh totals: %w", err)
	}
	apply := func(as []*account, totals map[string]int64, limit func(string) int64, kind string, period int64) {
		for _, a := range as {
			// The pending counts were written: the total holds them now.
			a.base.Store(totals[a.id])
			a.pending.Store(0)
			if m.cfg.Limits != nil {
				a.limit.Store(limit(a.id))
			}
			if a.over() && a.reported != period+1 {
				a.reported = period + 1
				if m.cfg.Exceeded != nil {
					m.cfg.Exceeded(ctx, kind, a.id)
				}
			}
		}
	}
	var tl, ol func(string) int64
	if m.cfg.Limits != nil {
		tl, ol = m.cfg.Limits.TokenDailyMax, m.cfg.Limits.OrgMonthlyMax
	}
	apply(toks, tt, tl, "token", dn)
	apply(orgs, ot, ol, "org", mn)
	return nil
}

// Run flushes every FlushInterval until ctx ends, then once more (bounded
// by the flush interval), so that a shutdown loses nothing the store
// takes. A failed flush is logged and retried at the next tick.
func (m *Meter) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.FlushInterval)
			defer cancel()
			if err := m.Flush(fctx); err != nil {
				m.cfg.Logger.Error("usage flush at shutdown failed", logkey.Err, err)
			}
			return
		case <-t.C:
			if err := m.Flush(ctx); err != nil {
				m.cfg.Logger.Warn("usage flush failed; counts kept for the next one", logkey.Err, err)
			}
		}
	}
}
