package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
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
	if g.scaler != nil {
		if err := g.scaler.armed.reload(ctx); err != nil {
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
	if g.scaler != nil {
		expiriesChanged = g.scaler.expiry.changed
	}
	for {
		select {
		case <-expiriesChanged:
			g.scaler.expiry.resetTimer(expire)
			continue
		case <-expire.C:
			for _, id := range g.scaler.expiry.due(time.Now()) {
				g.tokens.disconnect(id, "token expired")
				g.scaler.releaseArmer(ctx, id, "expired")
			}
			g.scaler.expiry.resetTimer(expire)
			continue
		case <-sweep.C:
			// Revocations past their sessions' expiry leave memory.
			g.access.ReloadRevocations(ctx, "")
			if g.scaler != nil {
				g.scaler.sweep(ctx)
			}
			continue
		case <-reload.C:
			pending = false
			if err := g.scaler.armed.reload(ctx); err != nil {
				g.log.Error("scaling records reload failed", logkey.Err, err)
			}
			continue
		case ch, ok := <-changes:
			if !ok {
				reload.Stop()
				return
			}
			switch {
			case g.scaler == nil || !scalingChange(ch.Kind):
			case ch.Kind == store.ChangeScalingUpdated && !g.scaler.armed.knows(ch.ID) && time.Since(lastAtOnce) >= time.Second:
				lastAtOnce = time.Now()
				if err := g.scaler.armed.reload(ctx); err != nil {
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
		g.tokens.disconnect(ch.ID, "token revoked")
		g.scaler.releaseArmer(ctx, ch.ID, "revoked")
	case store.ChangeTokenUpdated:
		g.tokens.refresh(ctx, ch.ID)
		g.usage.limits.refresh(ctx, usageMiss{id: ch.ID})
	case store.ChangeOrgLimits:
		g.usage.limits.refresh(ctx, usageMiss{org: true, id: ch.OrgID})
	case store.ChangeMaintenanceSet, store.ChangeMaintenanceCleared:
		g.mirror.reloadMaintenance(ctx)
	case store.ChangeOrgHostnames:
		g.mirror.reloadOwnership(ctx)
	case store.ChangeOIDCRevoked:
		g.access.ReloadRevocations(ctx, ch.Hostname)
	case store.ChangeOrgPorts:
		g.mirror.reloadPortOwnership(ctx)
	case store.ChangeResync:
		// Changes may have been missed: re-check everything cached.
		g.mirror.reloadMaintenance(ctx)
		g.mirror.reloadOwnership(ctx)
		g.mirror.reloadPortOwnership(ctx)
		g.tokens.recheck(ctx)
		g.usage.limits.reloadAll(ctx)
		g.access.ReloadRevocations(ctx, "")
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
