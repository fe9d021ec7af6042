package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
	"github.com/aperio-dev/aperio/webhook"
)

// scalingRegistry passes every announced scaling block to the controller,
// one declaration per service hostname, and tells it when sessions end.
// An invalid block is refused with its reason sent back to the client (as
// a notice); the rest of the client keeps working.
type scalingRegistry struct {
	tunnel.Registry
	ctl *autoscale.Controller
	rt  *router.Router
	// arm reloads the router's armed binds from the store.
	arm func(ctx context.Context) error
	log *slog.Logger

	// armed remembers, per session, the binds whose arming it already
	// checked, so a bind that stays unarmed (disarmed by the breaker)
	// does not reload the records on every heartbeat.
	armed *sessionBinds
}

// sessionBinds is a set of binds per session, safe for concurrent use.
type sessionBinds struct {
	mu sync.Mutex // guards m
	m  map[string]map[string]bool
}

// first reports whether bind is new for session, and records it.
func (sb *sessionBinds) first(session, bind string) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.m == nil {
		sb.m = make(map[string]map[string]bool)
	}
	if sb.m[session] == nil {
		sb.m[session] = make(map[string]bool)
	}
	if sb.m[session][bind] {
		return false
	}
	sb.m[session][bind] = true
	return true
}

func (sb *sessionBinds) forget(session string) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	delete(sb.m, session)
}

func (r scalingRegistry) Update(s *tunnel.Session) []string {
	notices := r.Registry.Update(s)
	ann := s.Announcement()
	if ann.Scaling == nil {
		return notices
	}
	id := s.Identity()
	armer := id.TokenID
	if armer == "" {
		armer = "master"
	}
	sc := ann.Scaling
	block := autoscale.Declaration{
		URL: sc.URL, Secret: sc.Secret, Min: sc.Min, Max: sc.Max,
		ColdStart:         time.Duration(sc.ColdStartMS) * time.Millisecond,
		TargetUtilization: sc.TargetUtilization,
		Window:            time.Duration(sc.WindowMS) * time.Millisecond,
		Cooldown:          time.Duration(sc.CooldownMS) * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			key := h + "\x00" + svc.Path
			if seen[key] {
				continue
			}
			seen[key] = true
			err := r.ctl.Declare(ctx, autoscale.Announcement{OrgID: id.OrgID, Hostname: h, Path: svc.Path,
				Session: s.ID(), Armer: armer, Block: block})
			if err != nil {
				r.log.Warn("scaling declaration refused", "session_id", s.ID(), "hostname", h, "err", err)
				notices = append(notices, "scaling declaration for "+h+" refused: "+err.Error())
				continue
			}
			// A bind declared for the first time is armed at once rather
			// than at the next debounced reload, so a client that declares
			// and leaves straight away can still be cold started.
			if r.armed.first(s.ID(), key) && !r.rt.Armed(h, svc.Path) {
				if err := r.arm(ctx); err != nil {
					r.log.Error("arming a new scaling record failed", "hostname", h, "err", err)
				}
			}
		}
	}
	return notices
}

func (r scalingRegistry) Detach(s *tunnel.Session) {
	r.Registry.Detach(s)
	r.ctl.Leave(s.ID())
	r.armed.forget(s.ID())
}

// poolView gives the controller the router's live figures.
type poolView struct{ rt *router.Router }

func (v poolView) Pool(_, hostname, path string) autoscale.PoolStats {
	st := v.rt.Stats(hostname, path)
	return autoscale.PoolStats{Instances: st.Instances, Capacity: st.Capacity, Inflight: st.Inflight, Routable: st.Routable}
}

// lazyScaler hands the router's cold starts to the controller, which is
// built after the router (it reads the router's pools).
type lazyScaler struct{ g *Gateway }

func (l lazyScaler) ColdStart(ctx context.Context, org, host, path string) (router.ColdStart, error) {
	st, err := l.g.ctl.ColdStart(ctx, org, host, path)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// PlanColdStart lets the router explain a cold start without starting one
// (router.ColdStartPlanner).
func (l lazyScaler) PlanColdStart(ctx context.Context, org, host, path string) (bool, string, error) {
	p := l.g.ctl.PlanColdStart(ctx, org, host, path)
	var detail []string
	if !p.NextAllowed.IsZero() {
		detail = append(detail, "cooldown or backoff until "+p.NextAllowed.UTC().Format(time.RFC3339))
	}
	if p.ConsecutiveFailures > 0 {
		detail = append(detail, fmt.Sprintf("%d consecutive failed calls", p.ConsecutiveFailures))
	}
	return p.Join, strings.Join(detail, ", "), p.Err
}

// newController builds the autoscaling controller: hooks go out through
// the outbound fence with the operator's policy, and its events go to the
// subscribed webhooks through the same fence.
func (g *Gateway) newController() error {
	var err error
	g.hooks, err = webhook.New(webhook.Config{
		Subscriptions: g.db,
		Client:        g.fence,
		Logger:        g.log,
	})
	if err != nil {
		return err
	}
	g.expiry = newArmerExpiry()
	g.ctl, err = autoscale.New(autoscale.Config{
		Store:             g.db,
		Pool:              poolView{g.router},
		Caller:            observedCaller{next: autoscale.NewHTTPCaller(g.fence), counts: g.calls, tracer: g.tracer},
		Events:            g.hooks,
		Logger:            g.log,
		MaxCallsPerMinute: g.cfg.ScalingMaxCallsPerMinute,
		DeclareRefresh:    declareRefresh(g.cfg.ScalingRecordTTL),
	})
	return err
}

// declareRefresh is how often an unchanged declaration is written again:
// the controller's default, or half of scaling_record_ttl when that is
// shorter, so a live client's record is never old enough to be swept.
func declareRefresh(ttl time.Duration) time.Duration {
	if ttl > 0 && ttl/2 < autoscale.DefaultDeclareRefresh {
		return max(ttl/2, time.Millisecond)
	}
	return autoscale.DefaultDeclareRefresh
}

// loadArmed replaces the router's armed binds with the store's armed records,
// each admitting the visitors its armers' tokens admit, and hands the
// expiry of every token that arms a record, disarmed ones included, to
// g.expiry.
func (g *Gateway) loadArmed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	recs, err := g.db.ListScalingRecords(ctx, "")
	if err != nil {
		return err
	}
	// Records share armers: read each token once per load.
	tokens := make(map[string]store.Token)
	token := func(id string) (store.Token, error) {
		if t, ok := tokens[id]; ok {
			return t, nil
		}
		t, err := g.db.Token(ctx, "", id)
		if err != nil {
			return store.Token{}, err
		}
		tokens[id] = t
		return t, nil
	}
	var binds []router.ArmedBind
	expiring := make(map[string]time.Time)
	for _, rec := range recs {
		for _, armer := range rec.ArmedBy {
			if armer == "master" {
				continue
			}
			t, err := token(armer)
			if err != nil {
				return err
			}
			if t.ExpiresAt != nil {
				expiring[armer] = *t.ExpiresAt
			}
		}
		if rec.Disarmed {
			continue
		}
		allowed, err := armersAllowedIPs(rec, token)
		if err != nil {
			return err
		}
		binds = append(binds, router.ArmedBind{OrgID: rec.OrgID, Pattern: rec.Hostname, Path: rec.Path,
			ColdStart: rec.ColdStart, AllowedIPs: allowed})
	}
	g.router.SetArmed(binds)
	g.expiry.set(expiring)
	return nil
}

// armersAllowedIPs returns the visitors the record's armers admit: the
// union of their tokens' allowed_ips, or nil (everyone) as soon as one
// armer is unrestricted (the master token, or a token without the list).
func armersAllowedIPs(rec store.ScalingRecord, token func(id string) (store.Token, error)) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, armer := range rec.ArmedBy {
		if armer == "master" {
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
