package server

import (
	"context"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/ports"
	"github.com/aperio-dev/aperio/internal/portspec"
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
	g.registry.SetOwnership(router.Ownership{Patterns: m, DefaultOrg: g.defaultOrg})
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

// loadPortOwnership makes the public ports' ownership match the store:
// ports.Manager refuses a port another organization owns, even free.
func (g *Gateway) loadPortOwnership(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps, err := g.db.ListOrgPorts(ctx, "")
	if err != nil {
		return err
	}
	o := ports.Ownership{Ranges: make(map[string][]portspec.Range), DefaultOrg: g.defaultOrg}
	for _, p := range ps {
		o.Ranges[p.OrgID] = append(o.Ranges[p.OrgID], p.Range)
	}
	g.ports.SetOwnership(ctx, o)
	return nil
}

func (g *Gateway) reloadPortOwnership(ctx context.Context) {
	if err := g.loadPortOwnership(ctx); err != nil {
		g.log.Error("port ownership reload failed", logkey.Err, err)
	}
}

// OrgsWithoutPorts returns the names of the organizations other than
// defaultOrgName that own no public port but hold a live token whose
// allow_tcp_ports names some: their clients may open no port (only the
// default organization opens ports nobody owns, first come). It only
// reads the store; the server warns about them at startup when it has a
// tcp_port_range, and --check-config on a read-only store.
func OrgsWithoutPorts(ctx context.Context, db *store.DB, defaultOrgName string) ([]string, error) {
	orgs, err := db.ListOrgs(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := db.ListOrgPorts(ctx, "")
	if err != nil {
		return nil, err
	}
	owning := make(map[string]bool, len(ps))
	for _, p := range ps {
		owning[p.OrgID] = true
	}
	var out []string
	for _, o := range orgs {
		if o.Name == defaultOrgName || owning[o.ID] {
			continue
		}
		ts, err := db.ListTokens(ctx, o.ID)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			if t.RevokedAt == nil && len(t.Limits.AllowTCPPorts) > 0 {
				out = append(out, o.Name)
				break
			}
		}
	}
	return out, nil
}

// warnPortless logs a warning, on a server with public ports, when
// organizations besides the default one hold tokens for ports but own
// none.
func (g *Gateway) warnPortless(ctx context.Context) {
	if g.ports == nil || !g.ports.Enabled() {
		return
	}
	names, err := OrgsWithoutPorts(ctx, g.db, "default")
	if err != nil {
		g.log.Warn("cannot check organizations for public ports", logkey.Err, err)
		return
	}
	if len(names) > 0 {
		g.log.Warn("organizations without ports may open no public port, whatever their tokens' allow_tcp_ports; assign them with PUT /aperio/api/orgs/{id}/ports",
			logkey.Count, len(names), logkey.Orgs, names)
	}
}
