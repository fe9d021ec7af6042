package server

import (
	"context"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// loadOwnership makes the router's hostname ownership match the store.
// defaultOrg is the ID of the default organization, the one the master
// token's clients belong to.
func (g *Gateway) loadOwnership(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := g.db.ListOrgHostnames(ctx, "")
	if err != nil {
		return err
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Pattern] = h.OrgID
	}
	g.router.SetOwnership(router.Ownership{Patterns: m, DefaultOrg: g.defaultOrg})
	return nil
}

func (g *Gateway) reloadOwnership(ctx context.Context) {
	if err := g.loadOwnership(ctx); err != nil {
		g.log.Error("hostname ownership reload failed", logkey.Err, err)
		return
	}
	// Armed records are judged by ownership too (loadArmed).
	if g.armed != nil {
		if err := g.armed.reload(ctx); err != nil {
			g.log.Error("armed binds reload failed", logkey.Err, err)
		}
	}
}

// OrgsWithoutHostnames returns the names of the organizations other than
// defaultOrgName that own no hostname pattern: their clients may bind
// nothing and their keys may mint no token. It only reads the store; the
// server warns about them at startup, and --check-config on a read-only
// store.
func OrgsWithoutHostnames(ctx context.Context, db *store.DB, defaultOrgName string) ([]string, error) {
	orgs, err := db.ListOrgs(ctx)
	if err != nil {
		return nil, err
	}
	hs, err := db.ListOrgHostnames(ctx, "")
	if err != nil {
		return nil, err
	}
	owning := make(map[string]bool, len(hs))
	for _, h := range hs {
		owning[h.OrgID] = true
	}
	var out []string
	for _, o := range orgs {
		if o.Name != defaultOrgName && !owning[o.ID] {
			out = append(out, o.Name)
		}
	}
	return out, nil
}

// warnUnowned logs a warning when organizations besides the default one
// own no hostname pattern.
func (g *Gateway) warnUnowned(ctx context.Context) {
	names, err := OrgsWithoutHostnames(ctx, g.db, "default")
	if err != nil {
		g.log.Warn("cannot check organizations for hostname patterns", logkey.Err, err)
		return
	}
	if len(names) > 0 {
		g.log.Warn("organizations without hostname patterns may mint no token and bind no hostname; assign them with PUT /aperio/api/orgs/{id}/hostnames",
			logkey.Count, len(names), logkey.Orgs, names)
	}
}
