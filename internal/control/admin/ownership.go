package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/store"
)

// Bounds of the lists a request may carry.
const (
	// maxTokenHostnames bounds a token's hostnames, well inside the
	// tunnel's bound on the hostnames of one announcement.
	maxTokenHostnames = 100
	// maxTokenAllowedIPs bounds a token's allowed_ips.
	maxTokenAllowedIPs = 100
	// maxAuditListItems bounds the items of a list an audit detail
	// spells out; the rest are counted.
	maxAuditListItems = 10
)

// EventOrgHostnamesSet is PUT /orgs/{id}/hostnames: the master token
// replaced an organization's hostname patterns.
const EventOrgHostnamesSet = "org_hostnames_set"

// ownership is hostname ownership as one request reads it: who owns which
// pattern, and which organization is the default one.
//
// The rule every route that names a hostname applies (see check): an
// organization with patterns may name only what lies inside them; the
// default organization (DefaultOrg, the one the master token acts in) while
// it has no patterns may name anything that overlaps no other
// organization's pattern, as before ownership existed; any other
// organization without patterns may name nothing.
type ownership struct {
	owners     *hostname.Owners
	counts     map[string]int // patterns per organization
	defaultOrg string         // ID of DefaultOrg; "" when it does not exist yet
}

// ownership reads the current hostname ownership from the store.
func (a *API) ownership(ctx context.Context) (ownership, error) {
	hs, err := a.store.ListOrgHostnames(ctx, "")
	if err != nil {
		return ownership{}, err
	}
	m := make(map[string]string, len(hs))
	counts := make(map[string]int)
	for _, h := range hs {
		m[h.Pattern] = h.OrgID
		counts[h.OrgID]++
	}
	def, err := a.defaultOrgID(ctx)
	if err != nil {
		return ownership{}, err
	}
	return ownership{owners: hostname.NewOwners(m), counts: counts, defaultOrg: def}, nil
}

// defaultOrgID returns the ID of DefaultOrg, or "" while it does not
// exist. Organizations are never deleted, so a found ID is kept.
func (a *API) defaultOrgID(ctx context.Context) (string, error) {
	if id := a.defOrg.Load(); id != nil {
		return *id, nil
	}
	orgs, err := a.store.ListOrgs(ctx)
	if err != nil {
		return "", err
	}
	for _, o := range orgs {
		if o.Name == DefaultOrg {
			a.defOrg.Store(&o.ID)
			return o.ID, nil
		}
	}
	return "", nil
}

// check returns nil when organization orgID may name p (an exact name or
// a wildcard) in a token, a maintenance record or the like, and a 403
// otherwise. The message is the same whether another organization owns p
// or nobody does, so that a key learns nothing of other organizations.
func (o ownership) check(orgID, p string) error {
	switch {
	case o.counts[orgID] > 0:
		if o.owns(orgID, p) {
			return nil
		}
	case orgID == o.defaultOrg:
		if _, _, taken := o.owners.Overlap(p); !taken {
			return nil
		}
	default:
		return errorf(http.StatusForbidden,
			"organization %s owns no hostnames, so it may name none: the master token assigns them with PUT %s/orgs/%s/hostnames",
			orgID, Prefix, orgID)
	}
	return errorf(http.StatusForbidden, "hostname %s is not among the hostnames organization %s owns", p, orgID)
}

// owns reports whether one of orgID's patterns covers p. The owner of a
// hostname sees and may clear every record on it, whoever made it.
func (o ownership) owns(orgID, p string) bool {
	who, _, ok := o.owners.Owner(p)
	return ok && who == orgID
}

// ownsAny reports whether orgID owns one of hosts.
func (o ownership) ownsAny(orgID string, hosts []string) bool {
	for _, h := range hosts {
		if o.owns(orgID, h) {
			return true
		}
	}
	return false
}

// orgFromPath returns the organization {id} of the path as c may see it:
// a key sees only its own, and another organization's answers 404 exactly
// like one that does not exist.
func (a *API) orgFromPath(r *http.Request, c caller) (string, error) {
	id := pathParam(r, "id")
	notFound := errorf(http.StatusNotFound, "organization %q not found", id)
	if !c.sees(id) {
		return "", notFound
	}
	_, err := a.store.Org(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return "", notFound
	}
	return id, err
}

func (a *API) getOrgHostnames(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := a.orgFromPath(r, c)
	if err != nil {
		return err
	}
	hs, err := a.store.ListOrgHostnames(r.Context(), id)
	if err != nil {
		return err
	}
	out := OrgHostnames{OrgID: id, Patterns: make([]string, len(hs))}
	for i, h := range hs {
		out.Patterns[i] = h.Pattern
	}
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (a *API) setOrgHostnames(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := a.orgFromPath(r, c)
	if err != nil {
		return err
	}
	var req SetOrgHostnamesRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	patterns, problems := validPatterns("patterns", req.Patterns, store.MaxOrgHostnames, false)
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	stored, err := a.store.SetOrgHostnames(r.Context(), id, patterns)
	var oe *store.OverlapError
	switch {
	case errors.As(err, &oe):
		return errorf(http.StatusConflict, "hostname %s overlaps %s, owned by organization %s", oe.Pattern, oe.OwnerPattern, oe.OwnerOrgID)
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "organization %q not found", id)
	case err != nil:
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventOrgHostnamesSet,
		Actor:  c.actor(),
		OrgID:  id,
		Detail: "patterns=" + auditList(stored),
	})
	a.writeJSON(w, r, http.StatusOK, OrgHostnames{OrgID: id, Patterns: stored})
	return nil
}

// validPatterns lowercases and deduplicates hostname patterns (exact or
// wildcard), in their first order, and reports every invalid one. More
// than max entries (before deduplication, so that the work stays bounded)
// is one problem, and so is none when required.
func validPatterns(field string, in []string, max int, required bool) ([]string, []string) {
	if len(in) > max {
		return nil, []string{fmt.Sprintf("%s: %d entries, at most %d", field, len(in), max)}
	}
	if required && len(in) == 0 {
		return nil, []string{field + ": at least one hostname is required"}
	}
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	var problems []string
	for i, h := range in {
		h = strings.ToLower(strings.TrimSpace(h))
		if err := hostname.Validate(h); err != nil {
			problems = append(problems, fmt.Sprintf("%s[%d]: %v", field, i, err))
			continue
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out, problems
}

// auditList spells out at most maxAuditListItems of l, comma-separated,
// and counts the rest, so that an audit detail stays small whatever the
// list.
func auditList(l []string) string {
	if len(l) <= maxAuditListItems {
		return strings.Join(l, ",")
	}
	return fmt.Sprintf("%s,… (%d in all)", strings.Join(l[:maxAuditListItems], ","), len(l))
}
