package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// watchChanges applies the store's changes, whichever server made them:
// a revoked token's clients are disconnected at once and its scaling
// records released, maintenance and the router's armed binds follow the
// records, and a token that arms scaling records has them released when it
// expires. It returns when ctx ends.
func (g *Gateway) watchChanges(ctx context.Context, changes <-chan store.Change) {
	// Scaling records change on every heartbeat that declares one; the
	// router's armed set is reloaded at most once per second for those.
	// A record the last load did not read (created through another
	// server) is armed at once, so that a request for it finds it armed
	// here too rather than a 502; at most one such load a second, so a
	// flood of new records costs a load a second, not a load each.
	reload := time.NewTimer(time.Hour)
	reload.Stop()
	pending := false
	var lastAtOnce time.Time
	// New read the store before Serve subscribed: a change committed in
	// between (another server revoking a token or deleting a record while
	// this one started) reached no subscriber here. Re-read now, with the
	// subscription in place, so that nothing is missed.
	g.applyChange(ctx, store.Change{Kind: store.ChangeResync})
	if g.ctl != nil {
		if err := g.armed.reload(ctx); err != nil {
			g.log.Error("scaling records reload failed", logkey.Err, err)
		}
	}
	// Records nothing re-announced for scaling_record_ttl go; checked hourly.
	sweep := time.NewTicker(time.Hour)
	defer sweep.Stop()
	// Records go with the last token that armed them when it expires, as
	// when it is revoked: expire fires at the nearest expiry of an armer.
	expire := time.NewTimer(time.Hour)
	expire.Stop()
	defer expire.Stop()
	var expiriesChanged <-chan struct{} // nil, never ready, without scaling
	if g.expiry != nil {
		expiriesChanged = g.expiry.changed
	}
	for {
		select {
		case <-expiriesChanged:
			g.expiry.resetTimer(expire)
			continue
		case <-expire.C:
			for _, id := range g.expiry.due(time.Now()) {
				g.disconnectToken(id, "token expired")
				g.releaseArmer(ctx, id, "expired")
			}
			g.expiry.resetTimer(expire)
			continue
		case <-sweep.C:
			if g.denylist != nil {
				// Revocations past their sessions' expiry leave memory.
				g.reloadRevocations(ctx, "")
			}
			if g.ctl != nil && g.cfg.ScalingRecordTTL > 0 {
				ids, err := g.db.DeleteStaleScalingRecords(ctx, time.Now().Add(-g.cfg.ScalingRecordTTL))
				if err != nil {
					g.log.Error("scaling record sweep failed", logkey.Err, err)
				} else if len(ids) > 0 {
					g.log.Info("scaling records expired", logkey.Count, len(ids))
				}
			}
			continue
		case <-reload.C:
			pending = false
			if err := g.armed.reload(ctx); err != nil {
				g.log.Error("scaling records reload failed", logkey.Err, err)
			}
			continue
		case ch, ok := <-changes:
			if !ok {
				reload.Stop()
				return
			}
			switch {
			case g.ctl == nil || !scalingChange(ch.Kind):
			case ch.Kind == store.ChangeScalingUpdated && !g.armed.knows(ch.ID) && time.Since(lastAtOnce) >= time.Second:
				lastAtOnce = time.Now()
				if err := g.armed.reload(ctx); err != nil {
					g.log.Error("scaling records reload failed", logkey.Err, err)
				}
			case !pending:
				pending = true
				reload.Reset(time.Second)
			}
			g.applyChange(ctx, ch)
		}
	}
}

// applyChange acts on one change of the store.
func (g *Gateway) applyChange(ctx context.Context, ch store.Change) {
	switch ch.Kind {
	case store.ChangeTokenRevoked:
		g.disconnectToken(ch.ID, "token revoked")
		g.releaseArmer(ctx, ch.ID, "revoked")
	case store.ChangeTokenUpdated:
		g.refreshToken(ctx, ch.ID)
		g.usageLimits.refresh(ctx, usageMiss{id: ch.ID})
	case store.ChangeOrgLimits:
		g.usageLimits.refresh(ctx, usageMiss{org: true, id: ch.OrgID})
	case store.ChangeMaintenanceSet, store.ChangeMaintenanceCleared:
		g.reloadMaintenance(ctx)
	case store.ChangeOrgHostnames:
		g.reloadOwnership(ctx)
	case store.ChangeOIDCRevoked:
		if g.denylist != nil {
			g.reloadRevocations(ctx, ch.Hostname)
		}
	case store.ChangeOrgPorts:
		g.reloadPortOwnership(ctx)
	case store.ChangeResync:
		// Changes may have been missed: re-check everything cached.
		g.reloadMaintenance(ctx)
		g.reloadOwnership(ctx)
		g.reloadPortOwnership(ctx)
		g.recheckTokens(ctx)
		g.usageLimits.reloadAll(ctx)
		if g.denylist != nil {
			g.reloadRevocations(ctx, "")
		}
	}
}

// scalingChange reports whether a change of kind may change the router's
// armed binds.
func scalingChange(kind string) bool {
	switch kind {
	case store.ChangeScalingUpdated, store.ChangeScalingDisarmed, store.ChangeScalingDeleted, store.ChangeResync:
		return true
	}
	return false
}

// releaseArmer takes a revoked or expired token off every scaling record:
// a record goes with the last token that armed it. Every server sharing
// the store may do it for the same token; the second changes nothing.
func (g *Gateway) releaseArmer(ctx context.Context, tokenID, why string) {
	if g.ctl == nil {
		return
	}
	ids, err := g.db.ReleaseScalingArmer(ctx, tokenID)
	if err != nil {
		g.log.Error("releasing a token's scaling records failed", logkey.TokenID, tokenID, logkey.Reason, why, logkey.Err, err)
		return
	}
	if len(ids) > 0 {
		g.log.Info("scaling records released", logkey.TokenID, tokenID, logkey.Reason, why, logkey.Count, len(ids))
	}
}

// disconnectToken ends every session of the token.
func (g *Gateway) disconnectToken(tokenID, reason string) {
	for _, s := range g.tunnels.Sessions() {
		if s.Identity().TokenID == tokenID {
			g.log.Info("disconnecting client", logkey.SessionID, s.ID(), logkey.TokenID, tokenID, logkey.Reason, reason)
			s.GoAway(reason)
		}
	}
}

// tokenRecheckTimeout bounds one re-check of the tokens of every session,
// so that a slow store holds up the change watcher this long at most.
const tokenRecheckTimeout = 10 * time.Second

// recheckTokens disconnects sessions whose token was revoked while this
// server was not listening, and applies the edits and rotations it missed. It reads each token once, and blocks at most
// tokenRecheckTimeout: tokens it could not read in time keep their
// sessions until the next resync.
func (g *Gateway) recheckTokens(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, tokenRecheckTimeout)
	defer cancel()
	checked := make(map[string]bool)
	for _, s := range g.tunnels.Sessions() {
		id := s.Identity().TokenID
		if id == "" || checked[id] {
			continue
		}
		checked[id] = true
		t, err := g.db.Token(ctx, "", id)
		if err != nil {
			continue // unreachable store: keep the client; the next resync checks again
		}
		if t.RevokedAt != nil {
			g.disconnectToken(id, "token revoked")
			continue
		}
		// Edits and rotations may have been missed too.
		for _, s := range g.tunnels.Sessions() {
			if s.Identity().TokenID == id {
				g.refreshSession(s, t)
			}
		}
	}
}

func (g *Gateway) reloadMaintenance(ctx context.Context) {
	if err := g.loadMaintenance(ctx); err != nil {
		g.log.Error("maintenance reload failed", logkey.Err, err)
	}
}

// loadMaintenance makes the router's maintenance set match the store.
func (g *Gateway) loadMaintenance(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms, err := g.db.ListMaintenance(ctx)
	if err != nil {
		return err
	}
	entries := make([]router.Maintenance, len(ms))
	for i, m := range ms {
		entries[i] = router.Maintenance{Hostname: m.Hostname, Reason: m.Reason}
		if m.ExpiresAt != nil {
			entries[i].Until = *m.ExpiresAt
		}
	}
	g.registry.SetMaintenance(entries)
	return nil
}

// adminScaling is the autoscaler as admin.Config.Scaling takes it: nil
// while autoscaling is off, never an interface holding a nil controller.
func (g *Gateway) adminScaling() admin.Scaling {
	if g.ctl == nil {
		return nil
	}
	return armingScaling{Controller: g.ctl, arm: g.armed.reload, log: g.log}
}

// armingScaling is the controller as the admin API uses it: a record an
// operator arms (POST /scaling) is armed in this server's router before
// the API answers, so that a visitor who arrives right after the answer
// is held for a cold start rather than refused. The other servers sharing
// the store arm it through the change feed (watchChanges), as a record a
// client declared elsewhere.
type armingScaling struct {
	*autoscale.Controller
	arm func(ctx context.Context) error // reloads the router's armed binds
	log *slog.Logger
}

// Arm is autoscale.Controller.Arm, then a reload of the router's armed
// binds. A failed reload is logged: the record is stored, and the change
// feed and the periodic reload arm it soon.
func (s armingScaling) Arm(ctx context.Context, d autoscale.OperatorDeclaration) (autoscale.View, bool, error) {
	v, created, err := s.Controller.Arm(ctx, d)
	if err != nil {
		return v, created, err
	}
	if rerr := s.arm(ctx); rerr != nil {
		s.log.Error("arming a scaling record declared through the API failed", logkey.RecordID, v.ID, logkey.Err, rerr)
	}
	return v, created, nil
}

// nonNilStrings returns ss, or an empty slice for nil, so that JSON shows
// [] rather than null.
func nonNilStrings(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// accessWords names the parts of a service's announced access control
// for GET /clients (apitype.ClientInfo.Access): never a user, key, hash
// or address, only which controls are on. Empty (not nil) for none.
func accessWords(a *tunnel.Access) []string {
	out := []string{}
	if a == nil {
		return out
	}
	for _, p := range []struct {
		on   bool
		word string
	}{
		{a.Public, apitype.AccessPublic},
		{len(a.AllowedIPs) > 0, apitype.AccessAllowedIPs},
		{len(a.DeniedIPs) > 0, apitype.AccessDeniedIPs},
		{a.Basic != nil, apitype.AccessBasic},
		{a.Bearer != nil, apitype.AccessBearer},
		{a.JWT != nil, apitype.AccessJWT},
		{a.Forward != nil, apitype.AccessForward},
		{a.OIDC != nil, apitype.AccessOIDC},
	} {
		if p.on {
			out = append(out, p.word)
		}
	}
	return out
}

// SetClientDisabled implements admin.ClientDisabler: the router's kill
// switch.
func (g *Gateway) SetClientDisabled(id string, disabled bool) error {
	err := g.registry.SetDisabled(id, disabled)
	if errors.Is(err, router.ErrNoClient) {
		return fmt.Errorf("%w: %w", admin.ErrNoClient, err)
	}
	return err
}

// DrainClient implements admin.ClientDrainer: the session whose id is id
// says drain on every ack from now on (tunnel.Session.AskDrain).
func (g *Gateway) DrainClient(id string) error {
	for _, s := range g.tunnels.Sessions() {
		if s.ID() == id {
			s.AskDrain()
			return nil
		}
	}
	return fmt.Errorf("%w: %s", admin.ErrNoClient, id)
}

// Clients implements admin.ClientLister: one entry per connected client
// and announced service.
func (g *Gateway) Clients() []admin.ClientInfo {
	var out []admin.ClientInfo
	for _, s := range g.tunnels.Sessions() {
		if !s.Routed() {
			continue // mid-handshake: listed once its hostnames are served
		}
		ann := s.Announcement()
		binds := g.registry.Binds(s)
		for _, svc := range ann.Services {
			var cc *admin.Concurrency
			if c := svc.Concurrency; c != nil {
				cc = &admin.Concurrency{Mode: c.Mode, Desired: c.Desired, Min: c.Min, Max: c.Max, Fixed: c.Fixed}
			}
			var ejected *time.Time
			if t := g.registry.EjectedUntil(s, svc.ID); !t.IsZero() {
				ejected = &t
			}
			out = append(out, admin.ClientInfo{
				Disabled:      binds.Disabled,
				RefusedBinds:  nonNilStrings(binds.Refused),
				ID:            s.ID(),
				Name:          ann.Name,
				Service:       svc.Name,
				Version:       ann.Version,
				OrgID:         s.Identity().OrgID,
				Hostnames:     svc.Hostnames,
				Path:          svc.Path,
				Access:        accessWords(svc.Access),
				Priority:      svc.Priority,
				MaxConcurrent: svc.MaxConcurrent,
				Concurrency:   cc,
				Inflight:      int(g.registry.Inflight(s, svc.ID)),
				Healthy:       svc.Healthy,
				Draining:      ann.Draining || svc.Draining,
				ConnectedAt:   s.ConnectedAt(),
				RemoteAddr:    s.RemoteAddr(),
				Weight:        g.registry.Weight(s, svc.ID),
				EjectedUntil:  ejected,
			})
		}
	}
	return out
}
