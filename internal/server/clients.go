package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/tunnel"
)

// clientControl is the admin API's view of the connected clients: it
// lists them (GET /clients), disables and enables them (the router's kill
// switch) and asks them to drain. It implements admin.ClientLister,
// admin.ClientDisabler and admin.ClientDrainer.
type clientControl struct {
	tunnels  *tunnel.Server
	registry *router.Registry
}

// Clients lists the connected clients as GET /aperio/api/clients does:
// one entry per client and announced service, once its hostnames are
// routed.
func (g *Gateway) Clients() []admin.ClientInfo {
	return clientControl{tunnels: g.tunnels, registry: g.registry}.Clients()
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
func (cc clientControl) SetClientDisabled(id string, disabled bool) error {
	err := cc.registry.SetDisabled(id, disabled)
	if errors.Is(err, router.ErrNoClient) {
		return fmt.Errorf("%w: %w", admin.ErrNoClient, err)
	}
	return err
}

// DrainClient implements admin.ClientDrainer: the session whose id is id
// says drain on every ack from now on (tunnel.Session.AskDrain).
func (cc clientControl) DrainClient(id string) error {
	for _, s := range cc.tunnels.Sessions() {
		if s.ID() == id {
			s.AskDrain()
			return nil
		}
	}
	return fmt.Errorf("%w: %s", admin.ErrNoClient, id)
}

// Clients implements admin.ClientLister: one entry per connected client
// and announced service.
func (cc clientControl) Clients() []admin.ClientInfo {
	var out []admin.ClientInfo
	for _, s := range cc.tunnels.Sessions() {
		if !s.Routed() {
			continue // mid-handshake: listed once its hostnames are served
		}
		ann := s.Announcement()
		binds := cc.registry.Binds(s)
		for _, svc := range ann.Services {
			var conc *admin.Concurrency
			if c := svc.Concurrency; c != nil {
				conc = &admin.Concurrency{Mode: c.Mode, Desired: c.Desired, Min: c.Min, Max: c.Max, Fixed: c.Fixed}
			}
			var ejected *time.Time
			if t := cc.registry.EjectedUntil(s, svc.ID); !t.IsZero() {
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
				Concurrency:   conc,
				Inflight:      int(cc.registry.Inflight(s, svc.ID)),
				Healthy:       svc.Healthy,
				Draining:      ann.Draining || svc.Draining,
				ConnectedAt:   s.ConnectedAt(),
				RemoteAddr:    s.RemoteAddr(),
				Weight:        cc.registry.Weight(s, svc.ID),
				EjectedUntil:  ejected,
			})
		}
	}
	return out
}
