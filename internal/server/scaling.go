package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/outbound"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
	"go.opentelemetry.io/otel/trace"
)

// scalingHook is autoscale's declaration protocol with tunnel sessions
// (autoscale.Sessions: declarations per bind, refusal notices, logs and
// audits, the per-session declarers that keep store writes off the
// session's control loop) as the "scaling" session hook, the first after
// the router: each announcement's binds are the ones the router accepted
// for it just before (router.Registry.Bound).
type scalingHook struct {
	decl *autoscale.Sessions
	reg  *router.Registry
}

// newScalingHook builds the declaration protocol of ctl over the router's
// registry reg: arm reloads the router's armed binds, em queues the
// refusals' audit entries, and downThreshold is client_down_threshold.
func newScalingHook(ctl *autoscale.Controller, reg *router.Registry, arm func(context.Context) error,
	em *events.Emitter, log *slog.Logger, downThreshold time.Duration) (*scalingHook, error) {
	decl, err := autoscale.NewSessions(autoscale.SessionsConfig{Controller: ctl, Armed: reg, Arm: arm, Audit: em,
		Logger: log, DownThreshold: downThreshold})
	if err != nil {
		return nil, err
	}
	return &scalingHook{decl: decl, reg: reg}, nil
}

// hook returns the scaling declarations' part in a session's life: they
// follow each announcement the router applied, and a session leaves the
// controller once the router forgot it.
func (h *scalingHook) hook() sessionHook {
	return sessionHook{
		name: "scaling",
		updated: func(ctx context.Context, s *tunnel.Session) []string {
			return h.decl.Update(ctx, routedSession{Session: s, reg: h.reg})
		},
		left: func(_ context.Context, s *tunnel.Session) { h.decl.Leave(s.ID()) },
	}
}

// routedSession is a tunnel session as autoscale.Sessions reads it: its
// binds are the ones the router accepted.
type routedSession struct {
	*tunnel.Session
	reg *router.Registry
}

// Bound reports whether the router accepted the bind of hostname and path
// for the session's latest announcement.
func (s routedSession) Bound(hostname, path string) bool {
	return s.reg.Bound(s.Session, hostname, path)
}

// poolView gives the controller the live figures of the router's registry.
type poolView struct{ reg *router.Registry }

// Pool reports the figures of the pool only to the organization whose
// record drives it (router.Registry.Drives): another organization's record, armed
// over overlapping token scopes, must not scale on, nor learn, the load of
// a pool it does not serve. To it the pool looks empty and unmeasurable,
// so it is never scaled out or in.
func (v poolView) Pool(orgID, hostname, path string) autoscale.PoolStats {
	if !v.reg.Drives(orgID, hostname, path) {
		return autoscale.PoolStats{}
	}
	st := v.reg.Stats(hostname, path)
	return autoscale.PoolStats{Instances: st.Instances, Capacity: st.Capacity, Inflight: st.Inflight, Routable: st.Routable}
}

// lazyScaler hands the router's cold starts to the controller, which is
// built after the router (it reads the router's pools).
type lazyScaler struct{ g *Gateway }

// ctl is the controller, once New built it.
func (l lazyScaler) ctl() *autoscale.Controller { return l.g.scaler.ctl }

func (l lazyScaler) ColdStart(ctx context.Context, org, host, path string) (router.ColdStart, error) {
	st, err := l.ctl().ColdStart(ctx, org, host, path)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// PlanColdStart lets the router explain a cold start without starting one
// (router.ColdStartPlanner).
func (l lazyScaler) PlanColdStart(ctx context.Context, org, host, path string) (bool, string, error) {
	p := l.ctl().PlanColdStart(ctx, org, host, path)
	var detail []string
	if !p.NextAllowed.IsZero() {
		detail = append(detail, "cooldown or backoff until "+p.NextAllowed.UTC().Format(time.RFC3339))
	}
	if p.ConsecutiveFailures > 0 {
		detail = append(detail, fmt.Sprintf("%d consecutive failed calls", p.ConsecutiveFailures))
	}
	return p.Join, strings.Join(detail, ", "), p.Err
}

// autoscaling is the autoscaler as this server runs it: the controller,
// the router's armed binds loaded from the store's records, the expiry of
// the tokens that arm them, and the declaration protocol of the "scaling"
// session hook. The gateway holds nil while autoscaling is off.
type autoscaling struct {
	ctl    *autoscale.Controller
	armed  *armLoader   // loads the router's armed binds
	expiry *armerExpiry // times the release of records armed by tokens that expire
	hook   *scalingHook // declarations per bind, from each announcement
	db     *store.DB
	reg    *router.Registry
	log    *slog.Logger
	// recordTTL is scaling_record_ttl: records nothing re-announced for
	// this long are swept (zero: never).
	recordTTL time.Duration
}

// scalingWiring is what the autoscaler takes from the rest of the server.
type scalingWiring struct {
	db         *store.DB
	reg        *router.Registry
	events     *events.Emitter     // queues the refusals' audit entries
	hooks      *webhook.Dispatcher // delivers the controller's events
	hub        *telemetry.Hub      // the admin API's live stream
	stats      *telemetry.Stats
	fence      *outbound.Client // hooks go out through it, with the operator's policy
	calls      *callCounts
	tracer     trace.Tracer // nil when tracing is off
	defaultOrg string
	log        *slog.Logger
}

// newAutoscaling builds the controller and its declaration protocol:
// hooks go out through the outbound fence with the operator's policy, and
// its events go to the subscribed webhooks through the same fence. The
// armed binds are loaded by the caller (armed.reload), once ownership is.
func newAutoscaling(cfg Config, w scalingWiring) (*autoscaling, error) {
	a := &autoscaling{expiry: newArmerExpiry(), db: w.db, reg: w.reg, log: w.log, recordTTL: cfg.ScalingRecordTTL}
	a.armed = &armLoader{load: a.loadArmed}
	sc := cfg.Scaling
	sc.Store, sc.Pool, sc.Logger = w.db, poolView{w.reg}, w.log
	sc.Events = streamEvents{next: w.hooks, hub: w.hub, stats: w.stats}
	sc.Caller = observedCaller{next: autoscale.NewHTTPCaller(w.fence), counts: w.calls, tracer: w.tracer}
	sc.DeclareRefresh = declareRefresh(sc.DeclareRefresh, cfg.ScalingRecordTTL)
	sc.DefaultOrgID, sc.Policy = w.defaultOrg, w.fence
	var err error
	if a.ctl, err = autoscale.New(sc); err != nil {
		return nil, err
	}
	if a.hook, err = newScalingHook(a.ctl, w.reg, a.armed.reload, w.events, w.log, cfg.Tunnel.DownThreshold); err != nil {
		a.ctl.Close() // its owner goroutine runs from New on
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return a, nil
}

// releaseArmer takes a revoked or expired token off every scaling record:
// a record goes with the last token that armed it. Every server sharing
// the store may do it for the same token; the second changes nothing.
// Nothing to do while autoscaling is off (a nil a).
func (a *autoscaling) releaseArmer(ctx context.Context, tokenID, why string) {
	if a == nil {
		return
	}
	ids, err := a.db.ReleaseScalingArmer(ctx, tokenID)
	if err != nil {
		a.log.Error("releasing a token's scaling records failed", logkey.TokenID, tokenID, logkey.Reason, why, logkey.Err, err)
		return
	}
	if len(ids) > 0 {
		a.log.Info("scaling records released", logkey.TokenID, tokenID, logkey.Reason, why, logkey.Count, len(ids))
	}
}

// sweep deletes the records nothing re-announced for scaling_record_ttl.
func (a *autoscaling) sweep(ctx context.Context) {
	if a.recordTTL <= 0 {
		return
	}
	ids, err := a.db.DeleteStaleScalingRecords(ctx, time.Now().Add(-a.recordTTL))
	if err != nil {
		a.log.Error("scaling record sweep failed", logkey.Err, err)
	} else if len(ids) > 0 {
		a.log.Info("scaling records expired", logkey.Count, len(ids))
	}
}

// admin is the autoscaler as admin.Config.Scaling takes it: nil while
// autoscaling is off (a nil a), never an interface holding a nil
// controller.
func (a *autoscaling) admin() admin.Scaling {
	if a == nil {
		return nil
	}
	return armingScaling{Controller: a.ctl, arm: a.armed.reload, log: a.log}
}

// declareRefresh is how often an unchanged declaration is written again:
// the controller's setting (its default when zero), or half of
// scaling_record_ttl when that is shorter, so a live client's record is
// never old enough to be swept.
func declareRefresh(refresh, ttl time.Duration) time.Duration {
	if refresh <= 0 {
		refresh = autoscale.DefaultConfig().DeclareRefresh
	}
	if ttl > 0 && ttl/2 < refresh {
		return max(ttl/2, time.Millisecond)
	}
	return refresh
}

// armLoader runs loads of the router's armed binds one at a time and lets
// concurrent callers share them: reload returns after a load that began
// after it was called, so any number of concurrent callers costs at most
// two loads. A load reads every record and its armers' tokens, so this is
// what keeps a burst of new binds from costing O(records) each.
type armLoader struct {
	load  func(ctx context.Context) error
	asked atomic.Uint64 // reload calls so far
	loads atomic.Int64  // loads run so far
	// known holds the IDs of the records the last load read, so that the
	// change feed can tell a record it has never seen (reloaded at once)
	// from an update of one it has (left to the debounced reload).
	known atomic.Pointer[map[string]bool]

	mu   sync.Mutex // serializes loads and guards the following fields
	done uint64     // the reload calls the last load began after
	err  error      // the last load's result
}

// knows reports whether the last load read record id.
func (l *armLoader) knows(id string) bool {
	m := l.known.Load()
	return m != nil && (*m)[id]
}

// reload makes sure a load of the armed binds begins after the call, and
// returns that load's error. It blocks while a load runs.
func (l *armLoader) reload(ctx context.Context) error {
	ticket := l.asked.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done >= ticket {
		return l.err
	}
	covered := l.asked.Load()
	l.loads.Add(1)
	l.err = l.load(ctx)
	l.done = covered
	return l.err
}

// loadArmed replaces the router's armed binds with the store's armed records,
// each admitting the visitors its armers' tokens admit, and hands the
// expiry of every token that arms a record, disarmed ones included, to
// a.expiry.
func (a *autoscaling) loadArmed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	recs, err := a.db.ListScalingRecords(ctx, "")
	if err != nil {
		return err
	}
	// Records share armers: read each token once per load.
	tokens := make(map[string]store.Token)
	token := func(id string) (store.Token, error) {
		if t, ok := tokens[id]; ok {
			return t, nil
		}
		t, err := a.db.Token(ctx, "", id)
		if err != nil {
			return store.Token{}, err
		}
		tokens[id] = t
		return t, nil
	}
	// The first record declared for a bind takes precedence in the router.
	slices.SortStableFunc(recs, func(x, y store.ScalingRecord) int {
		return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
	})
	var binds []router.ArmedBind
	expiring := make(map[string]time.Time)
	known := make(map[string]bool, len(recs))
	for _, rec := range recs {
		known[rec.ID] = true
	}
	for _, rec := range recs {
		for _, armer := range rec.ArmedBy {
			if armer == apitype.Master || autoscale.OperatorArmer(armer) {
				continue // no token, no expiry
			}
			t, err := token(armer)
			if err != nil {
				return err
			}
			if t.ExpiresAt != nil {
				expiring[armer] = *t.ExpiresAt
			}
		}
		if rec.Disarmed || !a.reg.Owns(rec.OrgID, rec.Hostname) {
			continue
		}
		// A record none of whose armers may bind the hostname (declared
		// before declarations were checked, or by a token since narrowed)
		// stays unarmed: it must never hold, nor cold start, anyone's
		// visitors.
		entitled, err := armersEntitled(rec, token)
		if err != nil {
			return err
		}
		if !entitled {
			continue
		}
		allowed, err := armersAllowedIPs(rec, token)
		if err != nil {
			return err
		}
		binds = append(binds, router.ArmedBind{OrgID: rec.OrgID, Pattern: rec.Hostname, Path: rec.Path,
			ColdStart: rec.ColdStart, AllowedIPs: allowed})
	}
	a.reg.SetArmed(binds)
	a.armed.known.Store(&known)
	a.expiry.set(expiring)
	return nil
}

// armersEntitled reports whether some armer of rec may arm it: the master
// token, an admin API caller (autoscale.OperatorArmer: POST /scaling
// checked that the record's organization may bind the hostname, and
// loadArmed checks that it still does), or a token of the record's
// organization whose hostnames allow the record's hostname.
func armersEntitled(rec store.ScalingRecord, token func(id string) (store.Token, error)) (bool, error) {
	for _, armer := range rec.ArmedBy {
		if armer == apitype.Master || autoscale.OperatorArmer(armer) {
			return true, nil
		}
		t, err := token(armer)
		if err != nil {
			return false, err
		}
		if t.OrgID == rec.OrgID && router.MayArm(t.Hostnames, rec.Hostname) {
			return true, nil
		}
	}
	return false, nil
}

// armersAllowedIPs returns the visitors the record's armers admit: the
// union of their tokens' allowed_ips, or nil (everyone) as soon as one
// armer is unrestricted (the master token, an admin API caller, or a
// token without the list).
func armersAllowedIPs(rec store.ScalingRecord, token func(id string) (store.Token, error)) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, armer := range rec.ArmedBy {
		if armer == apitype.Master || autoscale.OperatorArmer(armer) {
			return nil, nil
		}
		t, err := token(armer)
		if err != nil {
			return nil, err
		}
		if len(t.AllowedIPs) == 0 {
			return nil, nil
		}
		for _, s := range t.AllowedIPs {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}
