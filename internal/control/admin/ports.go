package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/store"
)

// EventOrgPortsSet is PUT /orgs/{id}/ports: the master token replaced an
// organization's public port ranges.
const EventOrgPortsSet = "org_ports_set"

// portOwnership is port ownership as one request reads it: who owns which
// range, and which organization is the default one. The rule (as for
// hostnames, see ownership): an organization with ports may name only
// ports inside them; the default organization while it owns none may name
// any port no other organization owns; any other organization without
// ports may name none.
type portOwnership struct {
	ranges     []store.OrgPorts
	counts     map[string]int // ranges per organization
	defaultOrg string
}

// portOwnership reads the current port ownership from the store.
func (a *API) portOwnership(ctx context.Context) (portOwnership, error) {
	ps, err := a.store.ListOrgPorts(ctx, "")
	if err != nil {
		return portOwnership{}, err
	}
	counts := make(map[string]int)
	for _, p := range ps {
		counts[p.OrgID]++
	}
	def, err := a.defaultOrgID(ctx)
	if err != nil {
		return portOwnership{}, err
	}
	return portOwnership{ranges: ps, counts: counts, defaultOrg: def}, nil
}

// check returns nil when organization orgID may name r in a token's
// allow_tcp_ports, and a 403 naming r otherwise. The message does not say
// whether another organization owns r, so that a key learns nothing of
// other organizations.
func (o portOwnership) check(orgID string, r portspec.Range) error {
	switch {
	case o.counts[orgID] > 0:
		for _, p := range o.ranges {
			if p.OrgID == orgID && p.Lo <= r.Lo && r.Hi <= p.Hi {
				return nil
			}
		}
	case orgID == o.defaultOrg:
		taken := false
		for _, p := range o.ranges {
			taken = taken || p.Lo <= r.Hi && r.Lo <= p.Hi
		}
		if !taken {
			return nil
		}
	default:
		return errorf(http.StatusForbidden,
			"allow_tcp_ports %s: organization %s owns no ports, so it may name none: the master token assigns them with PUT %s/orgs/%s/ports",
			r, orgID, Prefix, orgID)
	}
	return errorf(http.StatusForbidden, "allow_tcp_ports %s is not among the ports organization %s owns", r, orgID)
}

// checkTokenPorts returns nil when every spec of a token's
// allow_tcp_ports (already valid) lies inside the server's
// tcp_port_range (400 naming the first that does not) and inside the
// ports organization orgID may name (403 naming it).
func (a *API) checkTokenPorts(ctx context.Context, orgID string, specs []string) error {
	if len(specs) == 0 {
		return nil
	}
	rs, err := portspec.ParseList(specs)
	if err != nil {
		return errorf(http.StatusBadRequest, "allow_tcp_ports: %v", err)
	}
	for _, r := range rs {
		if !a.inTCPRange(r) {
			if len(a.tcpRange) == 0 {
				return errorf(http.StatusBadRequest, "allow_tcp_ports %s: this server opens no public port (tcp_port_range is off)", r)
			}
			return errorf(http.StatusBadRequest, "allow_tcp_ports %s is outside the server's tcp_port_range %s", r, rangeList(a.tcpRange))
		}
	}
	own, err := a.portOwnership(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := own.check(orgID, r); err != nil {
			return err
		}
	}
	return nil
}

// inTCPRange reports whether every port of r is in the server's
// tcp_port_range.
func (a *API) inTCPRange(r portspec.Range) bool {
	for n := r.Lo; n <= r.Hi; {
		i := -1
		for j, s := range a.tcpRange {
			if s.Contains(n) {
				i = j
				break
			}
		}
		if i < 0 {
			return false
		}
		n = a.tcpRange[i].Hi + 1
	}
	return true
}

// rangeList spells ranges comma-separated.
func rangeList(rs []portspec.Range) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return strings.Join(out, ",")
}

func (a *API) getOrgPorts(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := a.orgFromPath(r, c)
	if err != nil {
		return err
	}
	ps, err := a.store.ListOrgPorts(r.Context(), id)
	if err != nil {
		return err
	}
	out := OrgPorts{OrgID: id, Ports: make([]string, len(ps))}
	for i, p := range ps {
		out.Ports[i] = p.Range.String()
	}
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (a *API) setOrgPorts(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := a.orgFromPath(r, c)
	if err != nil {
		return err
	}
	var req SetOrgPortsRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	if len(req.Ports) > store.MaxOrgPorts {
		return errorf(http.StatusBadRequest, "ports: %d entries, at most %d", len(req.Ports), store.MaxOrgPorts)
	}
	var problems []string
	for i, s := range req.Ports {
		if _, err := portspec.Parse(s); err != nil {
			problems = append(problems, fmt.Sprintf("ports[%d]: %v", i, err))
		}
	}
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	stored, err := a.store.SetOrgPorts(r.Context(), id, req.Ports)
	var oe *store.PortOverlapError
	switch {
	case errors.As(err, &oe):
		return errorf(http.StatusConflict, "ports %s overlap %s, owned by organization %s", oe.Range, oe.OwnerRange, oe.OwnerOrgID)
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "organization %q not found", id)
	case err != nil:
		return err
	}
	out := OrgPorts{OrgID: id, Ports: make([]string, len(stored))}
	for i, p := range stored {
		out.Ports[i] = p.String()
	}
	a.audit(r, store.AuditEntry{
		Event:  EventOrgPortsSet,
		Actor:  c.actor(),
		OrgID:  id,
		Detail: "ports=" + auditList(out.Ports),
	})
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}
