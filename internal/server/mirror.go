package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/internal/ports"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// storeMirror keeps what the router and the public ports copy from the
// store in step with it: hostname ownership, port ownership and
// maintenance. New loads each once (a failure stops the server), the
// change feed reloads them (a failure is logged and the copy kept), and
// the startup warnings about organizations that own nothing come from
// here.
type storeMirror struct {
	db       *store.DB
	registry *router.Registry
	ports    *ports.Manager
	// defaultOrg is the ID of the default organization, the one the
	// master token's clients belong to.
	defaultOrg string
	// armed reloads the router's armed binds, which ownership judges;
	// nil while autoscaling is off.
	armed *armLoader
	log   *slog.Logger
}

// loadOwnership makes the router's hostname ownership match the store.
func (m *storeMirror) loadOwnership(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := m.db.ListOrgHostnames(ctx, "")
	if err != nil {
		return err
	}
	patterns := make(map[string]string, len(hs))
	for _, h := range hs {
		patterns[h.Pattern] = h.OrgID
	}
	m.registry.SetOwnership(router.Ownership{Patterns: patterns, DefaultOrg: m.defaultOrg})
	return nil
}

func (m *storeMirror) reloadOwnership(ctx context.Context) {
	if err := m.loadOwnership(ctx); err != nil {
		m.log.Error("hostname ownership reload failed", logkey.Err, err)
		return
	}
	// Armed records are judged by ownership too (loadArmed).
	if m.armed != nil {
		if err := m.armed.reload(ctx); err != nil {
			m.log.Error("armed binds reload failed", logkey.Err, err)
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
func (m *storeMirror) warnUnowned(ctx context.Context) {
	names, err := OrgsWithoutHostnames(ctx, m.db, "default")
	if err != nil {
		m.log.Warn("cannot check organizations for hostname patterns", logkey.Err, err)
		return
	}
	if len(names) > 0 {
		m.log.Warn("organizations without hostname patterns may mint no token and bind no hostname; assign them with PUT /aperio/api/orgs/{id}/hostnames",
			logkey.Count, len(names), logkey.Orgs, names)
	}
}

// loadPortOwnership makes the public ports' ownership match the store:
// ports.Manager refuses a port another organization owns, even free.
func (m *storeMirror) loadPortOwnership(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ps, err := m.db.ListOrgPorts(ctx, "")
	if err != nil {
		return err
	}
	o := ports.Ownership{Ranges: make(map[string][]portspec.Range), DefaultOrg: m.defaultOrg}
	for _, p := range ps {
		o.Ranges[p.OrgID] = append(o.Ranges[p.OrgID], p.Range)
	}
	m.ports.SetOwnership(ctx, o)
	return nil
}

func (m *storeMirror) reloadPortOwnership(ctx context.Context) {
	if err := m.loadPortOwnership(ctx); err != nil {
		m.log.Error("port ownership reload failed", logkey.Err, err)
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
func (m *storeMirror) warnPortless(ctx context.Context) {
	if m.ports == nil || !m.ports.Enabled() {
		return
	}
	names, err := OrgsWithoutPorts(ctx, m.db, "default")
	if err != nil {
		m.log.Warn("cannot check organizations for public ports", logkey.Err, err)
		return
	}
	if len(names) > 0 {
		m.log.Warn("organizations without ports may open no public port, whatever their tokens' allow_tcp_ports; assign them with PUT /aperio/api/orgs/{id}/ports",
			logkey.Count, len(names), logkey.Orgs, names)
	}
}

func (m *storeMirror) reloadMaintenance(ctx context.Context) {
	if err := m.loadMaintenance(ctx); err != nil {
		m.log.Error("maintenance reload failed", logkey.Err, err)
	}
}

// loadMaintenance makes the router's maintenance set match the store.
func (m *storeMirror) loadMaintenance(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ms, err := m.db.ListMaintenance(ctx)
	if err != nil {
		return err
	}
	entries := make([]router.Maintenance, len(ms))
	for i, e := range ms {
		entries[i] = router.Maintenance{Hostname: e.Hostname, Reason: e.Reason}
		if e.ExpiresAt != nil {
			entries[i].Until = *e.ExpiresAt
		}
	}
	m.registry.SetMaintenance(entries)
	return nil
}
