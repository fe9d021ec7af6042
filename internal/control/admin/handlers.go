package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/control/webhook"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// maxNameLen bounds the names of organizations, tokens and keys, in bytes.
const maxNameLen = 200

// Audit listing bounds: GET /audit's default and largest limit.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

func (a *API) listOrgs(w http.ResponseWriter, r *http.Request, c caller) error {
	if c.master {
		orgs, err := a.store.ListOrgs(r.Context())
		if err != nil {
			return err
		}
		a.writeJSON(w, r, http.StatusOK, mapList(orgs, orgOf))
		return nil
	}
	o, err := a.store.Org(r.Context(), c.key.OrgID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.writeJSON(w, r, http.StatusOK, []Org{})
		return nil
	case err != nil:
		return err
	}
	a.writeJSON(w, r, http.StatusOK, []Org{orgOf(o)})
	return nil
}

func (a *API) createOrg(w http.ResponseWriter, r *http.Request, c caller) error {
	var req CreateOrgRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	name, err := validName("name", req.Name)
	if err != nil {
		return err
	}
	o, err := a.store.CreateOrg(r.Context(), name)
	if errors.Is(err, store.ErrConflict) {
		return errorf(http.StatusConflict, "an organization named %q already exists", name)
	}
	if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventOrgCreated,
		Actor:  c.actor(),
		OrgID:  o.ID,
		Detail: fmt.Sprintf("org %s name=%q", o.ID, o.Name),
	})
	a.writeJSON(w, r, http.StatusCreated, orgOf(o))
	return nil
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request, c caller) error {
	keys, err := a.store.ListAdminKeys(r.Context(), c.scope())
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, mapList(keys, keyOf))
	return nil
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request, c caller) error {
	var req CreateKeyRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	var problems []string
	name, err := validName("name", req.Name)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if parseRole(req.Role) == roleNone {
		problems = append(problems, fmt.Sprintf("role %q is not one of %s", req.Role, strings.Join(Roles(), ", ")))
	}
	expires, expProblem := keyExpiry(req, a.now())
	if expProblem != "" {
		problems = append(problems, expProblem)
	}
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	orgID, err := a.targetOrg(r.Context(), c, req.OrgID)
	if err != nil {
		return err
	}
	m := mint(keyPrefix)
	k, err := a.store.CreateAdminKey(r.Context(), store.AdminKey{
		OrgID:     orgID,
		Name:      name,
		Role:      req.Role,
		Prefix:    m.prefix,
		Hash:      m.hash,
		CreatedBy: c.actor().String(),
		ExpiresAt: expires,
	})
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "organization %q not found", orgID)
	}
	if errors.Is(err, store.ErrLimit) {
		return errorf(http.StatusConflict, "the organization has its max_admin_keys keys: delete one or raise max_admin_keys")
	}
	if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventAdminKeyCreated,
		Actor:  c.actor(),
		OrgID:  k.OrgID,
		Detail: fmt.Sprintf("key %s name=%q role=%s", k.ID, k.Name, k.Role),
	})
	a.writeJSON(w, r, http.StatusCreated, MintedKey{Key: keyOf(k), Secret: m.secret})
	return nil
}

func (a *API) deleteKey(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	// The store deletes by ID alone; look the key up first for the
	// organization and name the audit entry records.
	keys, err := a.store.ListAdminKeys(r.Context(), c.scope())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(keys, func(k store.AdminKey) bool { return k.ID == id })
	if i < 0 {
		return errorf(http.StatusNotFound, "admin key %q not found", id)
	}
	k := keys[i]
	err = a.store.DeleteAdminKey(r.Context(), k.OrgID, id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "admin key %q not found", id)
	}
	if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventAdminKeyDeleted,
		Actor:  c.actor(),
		OrgID:  k.OrgID,
		Detail: fmt.Sprintf("key %s name=%q role=%s", k.ID, k.Name, k.Role),
	})
	a.releaseKeyArmer(r, k)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// releaseKeyArmer takes the deleted key k off the scaling records it armed
// with POST /scaling, as a revoked client token is taken off its own: a
// record it alone armed goes (every server drops it through the store's
// change feed), and one a client or another caller also armed stays. A
// deleted key, perhaps because it leaked, thus leaves no provider URL of
// its choosing behind. The key is gone either way: a failure is logged,
// not answered.
func (a *API) releaseKeyArmer(r *http.Request, k store.AdminKey) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	armer := store.AdminKeyActor(k.ID).String()
	ids, err := a.store.ReleaseScalingArmer(ctx, armer)
	if err != nil {
		a.log.Error("releasing a deleted admin key's scaling records failed", logkey.Actor, armer, logkey.Err, err)
		return
	}
	if len(ids) > 0 {
		a.log.Info("scaling records released", logkey.Actor, armer, logkey.Reason, "admin key deleted", logkey.Count, len(ids))
	}
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request, c caller) error {
	tokens, err := a.store.ListTokens(r.Context(), c.scope())
	if err != nil {
		return err
	}
	now := a.now()
	a.writeJSON(w, r, http.StatusOK, mapList(tokens, func(t store.Token) Token { return tokenOf(t, now) }))
	return nil
}

// createTokenBody is CreateTokenRequest as the server decodes it:
// expires_at stays text so that a bad time gets a clear message.
type createTokenBody struct {
	Name       string   `json:"name"`
	Hostnames  []string `json:"hostnames"`
	AllowedIPs []string `json:"allowed_ips"`
	ExpiresAt  string   `json:"expires_at"`
	OrgID      string   `json:"org_id"`
	// AllowCatchAll is as in CreateTokenRequest.
	AllowCatchAll bool `json:"allow_catch_all"`
	// The limits, as in CreateTokenRequest.
	MaxRPS           float64  `json:"max_rps"`
	DailyMaxBytes    int64    `json:"daily_max_bytes"`
	MaxConnections   int      `json:"max_connections"`
	Paths            []string `json:"paths"`
	ClientAllowedIPs []string `json:"client_allowed_ips"`
	AllowTCPPorts    []string `json:"allow_tcp_ports"`
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request, c caller) error {
	var req createTokenBody
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	now := a.now()
	var problems []string
	name, err := validName("name", req.Name)
	if err != nil {
		problems = append(problems, err.Error())
	}
	// A catch-all token serves what nobody else binds, and a token for
	// public ports may serve no HTTP at all: neither needs a hostname.
	hosts, hostProblems := validPatterns("hostnames", req.Hostnames, maxTokenHostnames, !req.AllowCatchAll && len(req.AllowTCPPorts) == 0)
	problems = append(problems, hostProblems...)
	ips, ipProblems := validAllowedIPs(req.AllowedIPs)
	problems = append(problems, ipProblems...)
	limits, limitProblems := validTokenLimits(store.TokenLimits{MaxRPS: req.MaxRPS, DailyMaxBytes: req.DailyMaxBytes,
		MaxConnections: req.MaxConnections, Paths: req.Paths, ClientAllowedIPs: req.ClientAllowedIPs, AllowTCPPorts: req.AllowTCPPorts})
	problems = append(problems, limitProblems...)
	expires, expProblem := validExpiry(req.ExpiresAt, now)
	if expProblem != "" {
		problems = append(problems, expProblem)
	}
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	orgID, err := a.targetOrg(r.Context(), c, req.OrgID)
	if err != nil {
		return err
	}
	own, err := a.ownership(r.Context())
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if err := own.check(orgID, h); err != nil {
			return err
		}
	}
	if err := a.checkTokenPorts(r.Context(), orgID, limits.AllowTCPPorts); err != nil {
		return err
	}
	m := mint(tokenPrefix)
	t, err := a.store.CreateToken(r.Context(), store.Token{
		OrgID:      orgID,
		Name:       name,
		Prefix:     m.prefix,
		Hash:       m.hash,
		Hostnames:  hosts,
		AllowedIPs: ips,
		ExpiresAt:  expires,
		CreatedBy:  c.actor().String(),

		AllowCatchAll: req.AllowCatchAll,
		Limits:        limits,
	})
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "organization %q not found", orgID)
	}
	if errors.Is(err, store.ErrLimit) {
		return errorf(http.StatusConflict, "the organization has its max_tokens live tokens: revoke one or raise max_tokens")
	}
	if err != nil {
		return err
	}
	e := events.Event{
		Kind:   EventTokenCreated,
		Actor:  c.actor(),
		OrgID:  t.OrgID,
		Detail: fmt.Sprintf("token %s name=%q hostnames=%s allow_catch_all=%t", t.ID, t.Name, auditList(t.Hostnames), t.AllowCatchAll),
		Fields: tokenFields(t),
	}
	if len(t.Hostnames) == 1 {
		e.Hostname = t.Hostnames[0]
	}
	a.emit(r, e)
	a.writeJSON(w, r, http.StatusCreated, MintedToken{Token: tokenOf(t, now), Secret: m.secret})
	return nil
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	t, err := a.store.Token(r.Context(), c.scope(), id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "token %q not found", id)
	}
	if err != nil {
		return err
	}
	now := a.now()
	if t.RevokedAt != nil {
		// Revoking is done once; a repeat changes nothing and is not
		// audited again.
		a.writeJSON(w, r, http.StatusOK, tokenOf(t, now))
		return nil
	}
	t, err = a.store.RevokeToken(r.Context(), t.OrgID, id, now)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "token %q not found", id)
	}
	if err != nil {
		return err
	}
	a.emit(r, events.Event{
		Kind:   EventTokenRevoked,
		Actor:  c.actor(),
		OrgID:  t.OrgID,
		Detail: fmt.Sprintf("token %s name=%q", t.ID, t.Name),
		Fields: tokenFields(t),
	})
	a.writeJSON(w, r, http.StatusOK, tokenOf(t, now))
	return nil
}

func (a *API) listClients(w http.ResponseWriter, r *http.Request, c caller) error {
	// The master token sees every client without asking the store.
	var own ownership
	if !c.master {
		var err error
		if own, err = a.ownership(r.Context()); err != nil {
			return err
		}
	}
	var out []ClientInfo
	for _, ci := range a.clients.Clients() {
		// The owner of a hostname sees every client serving it, whatever
		// organization's token it connected with.
		if c.sees(ci.OrgID) || own.ownsAny(c.scope(), ci.Hostnames) {
			ci.Hostnames = nonNil(ci.Hostnames)
			out = append(out, ci)
		}
	}
	slices.SortStableFunc(out, func(x, y ClientInfo) int {
		return cmp.Or(y.ConnectedAt.Compare(x.ConnectedAt), cmp.Compare(x.ID, y.ID))
	})
	a.writeJSON(w, r, http.StatusOK, nonNil(out))
	return nil
}

// listPorts answers GET /ports: the public ports of the caller's
// organization (every one for the master token), by port and protocol.
func (a *API) listPorts(w http.ResponseWriter, r *http.Request, c caller) error {
	out := []PortInfo{}
	if a.ports != nil {
		for _, p := range a.ports.Ports() {
			if c.sees(p.OrgID) {
				p.Names, p.Sessions = nonNil(p.Names), nonNil(p.Sessions)
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(x, y PortInfo) int {
		return cmp.Or(cmp.Compare(x.Port, y.Port), cmp.Compare(x.Protocol, y.Protocol))
	})
	a.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// explainPort answers GET /ports/explain?port=N&protocol=tcp|udp[&ip=IP]:
// whether the port is open for the caller's organization and which of
// its entries would take a visitor from ip. A port another organization
// holds is answered as not open.
func (a *API) explainPort(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	num, err := strconv.Atoi(q.Get("port"))
	if err != nil || num < 1 || num > 65535 {
		return errorf(http.StatusBadRequest, "port %q is not a port number (1 to 65535)", truncate(q.Get("port"), 16))
	}
	proto := q.Get("protocol")
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" {
		return errorf(http.StatusBadRequest, "protocol %q is not tcp or udp", truncate(proto, 16))
	}
	var ip netip.Addr
	if s := q.Get("ip"); s != "" {
		if ip, err = netip.ParseAddr(s); err != nil || ip.Zone() != "" {
			return errorf(http.StatusBadRequest, "ip %q is not an IP address", truncate(s, 64))
		}
	}
	ex := PortExplanation{Port: num, Protocol: proto, Names: []string{}, Admitting: []string{}}
	if ip.IsValid() {
		ex.IP = ip.String()
	}
	var p PortInfo
	var admitting []string
	ok, enabled := false, false
	if a.ports != nil {
		p, admitting, ok, enabled = a.ports.Explain(num, proto, ip)
	}
	label := fmt.Sprintf("%d/%s", num, proto)
	switch {
	case !enabled:
		ex.Verdict = "refused: no public ports on this server (tcp_port_range is off)"
	case !ok || !c.sees(p.OrgID):
		ex.Verdict = "refused: no client holds " + label
	default:
		ex.Open, ex.Names, ex.Admitting = true, nonNil(p.Names), nonNil(admitting)
		switch {
		case len(admitting) == 0:
			ex.Verdict = "refused: the allowed_ips of every entry serving " + label + " (or of its token) exclude " + ex.IP
		case !ip.IsValid():
			ex.Verdict = fmt.Sprintf("open: %d entr%s (%s); give an ip to check allowed_ips", len(p.Names), map[bool]string{true: "y", false: "ies"}[len(p.Names) == 1], strings.Join(p.Names, ", "))
		default:
			ex.Verdict = fmt.Sprintf("relayed to %s (round-robin among %d)", strings.Join(admitting, " or "), len(admitting))
		}
	}
	a.writeJSON(w, r, http.StatusOK, ex)
	return nil
}

func (a *API) listScaling(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.scaling == nil {
		a.writeJSON(w, r, http.StatusOK, []autoscale.View{})
		return nil
	}
	vs, err := a.scopedScaling(r, c)
	if err != nil {
		return err
	}
	// Stable, so that records declared at the same instant keep the
	// controller's order.
	slices.SortStableFunc(vs, func(x, y autoscale.View) int { return y.UpdatedAt.Compare(x.UpdatedAt) })
	// autoscale.View encodes itself with the contract's keys and never
	// holds the secret.
	a.writeJSON(w, r, http.StatusOK, nonNil(vs))
	return nil
}

// maxScalingIDBytes bounds the ID GET /scaling/{id} looks up: a record's
// is "scl_" and 26 characters.
const maxScalingIDBytes = 64

// scalingIDParam returns the {id} of a scaling route, or a 400 for one no
// record can have (too long, or outside [A-Za-z0-9_-]), refused before any
// store access.
func scalingIDParam(r *http.Request) (string, error) {
	id := pathParam(r, "id")
	if id == "" || len(id) > maxScalingIDBytes {
		return "", errorf(http.StatusBadRequest, "scaling record id must be 1 to %d characters", maxScalingIDBytes)
	}
	for _, ch := range []byte(id) {
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '_' || ch == '-') {
			return "", errorf(http.StatusBadRequest, "scaling record id may hold only letters, digits, _ and -")
		}
	}
	return id, nil
}

// getScaling is GET /scaling/{id}: one record as the listing shows it,
// scoped exactly as the listing is, with the decisions and pool samples
// this server remembers of it.
func (a *API) getScaling(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := scalingIDParam(r)
	if err != nil {
		return err
	}
	v, err := a.scopedRecord(r, c, id)
	if err != nil {
		return err
	}
	h := a.scaling.History(id)
	a.writeJSON(w, r, http.StatusOK, ScalingRecordDetail{
		ScalingRecord: v.Wire(),
		Decisions:     nonNil(h.Decisions),
		Series:        nonNil(h.Series),
	})
	return nil
}

func (a *API) disarmScaling(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	// Look the record up within the caller's scope first: for the
	// organization and hostname the audit entry records.
	v, err := a.scopedRecord(r, c, id)
	if err != nil {
		return err
	}
	err = a.scaling.Disarm(r.Context(), v.OrgID, id)
	if errors.Is(err, autoscale.ErrNoRecord) || errors.Is(err, store.ErrNotFound) {
		return errScalingNotFound(id) // removed since the lookup
	}
	if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:    EventScalingDisarmedByOperator,
		Actor:    c.actor(),
		OrgID:    v.OrgID,
		Hostname: v.Hostname,
		Detail:   fmt.Sprintf("record %s path=%q", v.ID, v.Path),
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// scopedRecord returns the scaling record id among those c may see; an
// unknown record, another organization's, or any with autoscaling off
// answers the same 404.
func (a *API) scopedRecord(r *http.Request, c caller, id string) (autoscale.View, error) {
	if a.scaling == nil {
		return autoscale.View{}, errScalingNotFound(id)
	}
	vs, err := a.scopedScaling(r, c)
	if err != nil {
		return autoscale.View{}, err
	}
	i := slices.IndexFunc(vs, func(v autoscale.View) bool { return v.ID == id })
	if i < 0 {
		return autoscale.View{}, errScalingNotFound(id)
	}
	return vs[i], nil
}

// errScalingNotFound is the 404 of a scaling record the caller cannot see.
func errScalingNotFound(id string) error {
	return errorf(http.StatusNotFound, "scaling record %q not found", id)
}

// scopedScaling returns the scaling records c may see and disarm: its
// organization's, and every record on a hostname its organization owns,
// whoever declared it.
func (a *API) scopedScaling(r *http.Request, c caller) ([]autoscale.View, error) {
	if c.master {
		return a.scaling.List(r.Context(), "")
	}
	own, err := a.ownership(r.Context())
	if err != nil {
		return nil, err
	}
	scope := c.scope()
	if own.counts[scope] > 0 {
		scope = "" // records of other organizations on its hostnames too
	}
	vs, err := a.scaling.List(r.Context(), scope)
	if err != nil {
		return nil, err
	}
	// Filtering here, not only in the controller, keeps a key from ever
	// seeing another organization's record on a hostname it does not own,
	// whatever the implementation.
	return slices.DeleteFunc(vs, func(v autoscale.View) bool {
		return !c.sees(v.OrgID) && !own.owns(c.key.OrgID, v.Hostname)
	}), nil
}

func (a *API) listMaintenance(w http.ResponseWriter, r *http.Request, c caller) error {
	ms, err := a.store.ListMaintenance(r.Context())
	if err != nil {
		return err
	}
	own, err := a.ownership(r.Context())
	if err != nil {
		return err
	}
	// The owner of a hostname sees a record on it whoever set it. A
	// record past its end has no effect any more: it is not listed.
	now := a.now()
	ms = slices.DeleteFunc(ms, func(m store.Maintenance) bool {
		return !c.sees(m.OrgID) && !own.owns(c.scope(), m.Hostname) || m.ExpiresAt != nil && !now.Before(*m.ExpiresAt)
	})
	a.writeJSON(w, r, http.StatusOK, mapList(ms, maintenanceOf))
	return nil
}

func (a *API) setMaintenance(w http.ResponseWriter, r *http.Request, c caller) error {
	host, err := hostParam(r)
	if err != nil {
		return err
	}
	var req MaintenanceRequest
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	if err := checkMaintenanceRequest(req); err != nil {
		return err
	}
	orgID, own, err := a.ownedHost(r.Context(), c, req.OrgID, host)
	if err != nil {
		return err
	}
	now := a.now()
	m := store.Maintenance{Hostname: host, OrgID: orgID, By: c.actor().String(), Since: now, Reason: req.Reason}
	if req.TTLSeconds > 0 {
		end := now.Add(time.Duration(req.TTLSeconds) * time.Second)
		m.ExpiresAt = &end
	}
	err = a.store.SetMaintenance(r.Context(), m)
	if errors.Is(err, store.ErrConflict) && own.owns(orgID, host) {
		// Another organization's record on a hostname orgID owns (set
		// before ownership was assigned): the owner takes it over.
		if err = a.store.ClearMaintenance(r.Context(), "", host); err == nil || errors.Is(err, store.ErrNotFound) {
			err = a.store.SetMaintenance(r.Context(), m)
		}
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, "%s is in maintenance for another organization", host)
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "organization %q not found", orgID)
	case err != nil:
		return err
	}
	a.emit(r, events.Event{
		Kind:     EventMaintenanceOn,
		At:       now,
		Actor:    c.actor(),
		OrgID:    orgID,
		Hostname: host,
		Detail:   maintenanceAuditDetail(m),
		Data:     webhook.MaintenanceEvent{Type: webhook.EventMaintenanceOn, At: now, OrgID: orgID, Hostname: host, By: m.By, Reason: m.Reason, ExpiresAt: m.ExpiresAt},
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkMaintenanceRequest bounds the body of PUT /maintenance: a reason
// of at most router.MaxMaintenanceReasonBytes of printable UTF-8 (it is
// shown to visitors), a ttl_seconds from 0 to router.MaxMaintenanceTTL.
func checkMaintenanceRequest(req MaintenanceRequest) error {
	var problems []string
	if len(req.Reason) > router.MaxMaintenanceReasonBytes {
		problems = append(problems, fmt.Sprintf("reason: %d bytes, at most %d", len(req.Reason), router.MaxMaintenanceReasonBytes))
	} else if !utf8.ValidString(req.Reason) || strings.ContainsFunc(req.Reason, unicode.IsControl) {
		problems = append(problems, "reason: must be printable UTF-8 text on one line")
	}
	if max := int64(router.MaxMaintenanceTTL / time.Second); req.TTLSeconds < 0 || req.TTLSeconds > max {
		problems = append(problems, fmt.Sprintf("ttl_seconds: %d is not from 0 to %d (30 days)", req.TTLSeconds, max))
	}
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	return nil
}

// maintenanceAuditDetail describes m's reason and end for the audit log.
func maintenanceAuditDetail(m store.Maintenance) string {
	var parts []string
	if m.Reason != "" {
		parts = append(parts, "reason="+strconv.Quote(m.Reason))
	}
	if m.ExpiresAt != nil {
		parts = append(parts, "expires_at="+m.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, " ")
}

func (a *API) clearMaintenance(w http.ResponseWriter, r *http.Request, c caller) error {
	host, err := hostParam(r)
	if err != nil {
		return err
	}
	// Find the record first: the master token clears it in whichever
	// organization holds it, and the audit entry names that organization.
	ms, err := a.store.ListMaintenance(r.Context())
	if err != nil {
		return err
	}
	own, err := a.ownership(r.Context())
	if err != nil {
		return err
	}
	// The owner of a hostname may clear a record on it whoever set it.
	i := slices.IndexFunc(ms, func(m store.Maintenance) bool {
		return m.Hostname == host && (c.sees(m.OrgID) || own.owns(c.scope(), host))
	})
	if i < 0 {
		return errorf(http.StatusNotFound, "%s is not in maintenance", host)
	}
	orgID := ms[i].OrgID
	err = a.store.ClearMaintenance(r.Context(), orgID, host)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "%s is not in maintenance", host)
	}
	if err != nil {
		return err
	}
	now := a.now()
	a.emit(r, events.Event{
		Kind:     EventMaintenanceOff,
		At:       now,
		Actor:    c.actor(),
		OrgID:    orgID,
		Hostname: host,
		Data:     webhook.MaintenanceEvent{Type: webhook.EventMaintenanceOff, At: now, OrgID: orgID, Hostname: host, By: c.actor().String()},
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listAudit(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	aq := store.AuditQuery{OrgID: c.scope(), Limit: defaultAuditLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAuditLimit {
			return errorf(http.StatusBadRequest, "limit %q is not a number from 1 to %d", s, maxAuditLimit)
		}
		aq.Limit = n
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"event", &aq.Event}, {"actor", &aq.Actor}, {"hostname", &aq.Hostname}} {
		v := q.Get(f.name)
		if len(v) > store.MaxAuditQueryField {
			return errorf(http.StatusBadRequest, "%s: %d bytes, at most %d", f.name, len(v), store.MaxAuditQueryField)
		}
		*f.dst = v
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &aq.Since}, {"until", &aq.Until}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || len(v) > 64 {
			return errorf(http.StatusBadRequest, "%s %.64q is not an RFC 3339 time (2006-01-02T15:04:05Z)", f.name, v)
		}
		*f.dst = t
	}
	es, err := a.store.QueryAudit(r.Context(), aq)
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, mapList(es, auditOf))
	return nil
}

func (a *API) openAPI(w http.ResponseWriter, r *http.Request, _ caller) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(openAPIDoc) // a failed write means the client went away
	return nil
}

// targetOrg returns the organization a create acts in: a key's own (it may
// not name one), or for the master token the one requested, DefaultOrg when
// none is.
func (a *API) targetOrg(ctx context.Context, c caller, requested string) (string, error) {
	if !c.master {
		if requested != "" {
			return "", errorf(http.StatusBadRequest, "org_id may only be set with the master token: an admin key acts in its own organization")
		}
		return c.key.OrgID, nil
	}
	if requested != "" {
		// Checked here, before anything else is judged in its name.
		_, err := a.store.Org(ctx, requested)
		if errors.Is(err, store.ErrNotFound) {
			return "", errorf(http.StatusNotFound, "organization %q not found", requested)
		}
		return requested, err
	}
	o, err := a.store.EnsureOrg(ctx, DefaultOrg)
	if err != nil {
		return "", fmt.Errorf("ensure org %q: %w", DefaultOrg, err)
	}
	return o.ID, nil
}

// validName returns the trimmed name, or a 400 naming field.
func validName(field, s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", errorf(http.StatusBadRequest, "%s is required", field)
	case len(s) > maxNameLen:
		return "", errorf(http.StatusBadRequest, "%s is longer than %d bytes", field, maxNameLen)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "", errorf(http.StatusBadRequest, "%s contains control characters", field)
	}
	return s, nil
}

// validAllowedIPs normalizes CIDRs and bare addresses (as /32 or /128),
// deduplicates them in their first order, and reports every invalid one;
// more than maxTokenAllowedIPs entries is one problem.
func validAllowedIPs(ips []string) ([]string, []string) {
	return validCIDRs("allowed_ips", ips, maxTokenAllowedIPs)
}

// validCIDRs is validAllowedIPs for the list called field, of at most max
// entries.
func validCIDRs(field string, ips []string, max int) ([]string, []string) {
	if len(ips) > max {
		return nil, []string{fmt.Sprintf("%s: %d entries, at most %d", field, len(ips), max)}
	}
	var out, problems []string
	seen := make(map[netip.Prefix]bool, len(ips))
	for i, s := range ips {
		p, err := parseAllowedIP(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s[%d]: %v", field, i, err))
			continue
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p.String())
		}
	}
	return out, problems
}

// parseAllowedIP parses a CIDR, or a bare address as the prefix holding it
// alone. A CIDR with bits set past its length is refused rather than
// guessed at.
func parseAllowedIP(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a valid CIDR", s)
		}
		if m := p.Masked(); m != p {
			return netip.Prefix{}, fmt.Errorf("%q has bits set past its prefix length: did you mean %s?", s, m)
		}
		return p, nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil || addr.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid IP address or CIDR", s)
	}
	addr = addr.Unmap()
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// hostParam returns the normalized {hostname} of the path, or a 400: an
// exact hostname or a "*." wildcard, which puts every subdomain in
// maintenance (an exact record wins over it).
func hostParam(r *http.Request) (string, error) {
	h := strings.ToLower(pathParam(r, "hostname"))
	if err := hostname.Validate(h); err != nil {
		return "", errorf(http.StatusBadRequest, "%v", err)
	}
	return h, nil
}

// pathParam returns the named parameter of the route, unescaped: chi
// matches on the escaped path when the client escaped more than it had to
// ("%2A.example.com").
func pathParam(r *http.Request, name string) string {
	p := chi.URLParam(r, name)
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// ShareMinter mints share links: the server's share keyring.
type ShareMinter interface {
	// Mint returns the link opening host (exact) under path for ttl,
	// signed with organization orgID's current key, its URL built for the
	// visitors of r's server, and the link's nonce for audit; an error
	// wrapping ErrBadShare says what is wrong with host, path or ttl, any
	// other is the server's.
	Mint(r *http.Request, orgID, host, path string, ttl time.Duration) (link ShareLink, nonce string, err error)
	// RotateKey gives organization orgID a new current share key; with
	// revokePrevious the key it replaces stops verifying on every server.
	RotateKey(ctx context.Context, orgID string, revokePrevious bool) (ShareKey, error)
}

// ErrBadShare marks a ShareMinter.Mint error the caller's request caused
// (answered 400); other errors are the server's.
var ErrBadShare = errors.New("bad share link request")

// createShare is POST /share: a share link for a hostname the caller's
// organization owns.
func (a *API) createShare(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.shares == nil {
		return errorf(http.StatusNotFound, "share links are off on this server")
	}
	var req CreateShareRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	host, err := exactHostname(req.Hostname, "a share link opens one exact hostname")
	if err != nil {
		return err
	}
	ttl, err := time.ParseDuration(req.TTL)
	if err != nil || ttl <= 0 {
		return errorf(http.StatusBadRequest, "ttl %q is not a positive duration (1h, 90m)", req.TTL)
	}
	orgID, _, err := a.ownedHost(r.Context(), c, req.OrgID, host)
	if err != nil {
		return err
	}
	link, nonce, err := a.shares.Mint(r, orgID, host, req.Path, ttl)
	if errors.Is(err, ErrBadShare) {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	if err != nil {
		return fmt.Errorf("mint share link: %w", err)
	}
	a.audit(r, store.AuditEntry{
		Event:    EventShareCreated,
		Actor:    c.actor(),
		OrgID:    orgID,
		Hostname: host,
		Detail:   fmt.Sprintf("path %s, expires %s, nonce %s", link.Path, link.ExpiresAt.UTC().Format(time.RFC3339), nonce),
	})
	a.writeJSON(w, r, http.StatusCreated, link)
	return nil
}

// rotateShareKey is POST /share/keys/rotate: a new current share key for
// the caller's organization (only the master token may name another),
// the previous one kept or revoked.
func (a *API) rotateShareKey(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.shares == nil {
		return errorf(http.StatusNotFound, "share links are off on this server")
	}
	var req RotateShareKeyRequest
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	orgID, err := a.targetOrg(r.Context(), c, req.OrgID)
	if err != nil {
		return err
	}
	key, err := a.shares.RotateKey(r.Context(), orgID, req.RevokePrevious)
	if err != nil {
		return fmt.Errorf("rotate share key: %w", err)
	}
	detail := fmt.Sprintf("key %s, generation %d, previous kept", key.ID, key.Generation)
	if req.RevokePrevious {
		detail = fmt.Sprintf("key %s, generation %d, previous revoked", key.ID, key.Generation)
	}
	a.audit(r, store.AuditEntry{Event: EventShareKeyRotated, Actor: c.actor(), OrgID: orgID, Detail: detail})
	a.writeJSON(w, r, http.StatusOK, key)
	return nil
}

// ownedHost returns the organization a request acts for (requested is
// its org_id) and the ownership it was judged by, or the error answering
// it when that organization may not use host.
func (a *API) ownedHost(ctx context.Context, c caller, requested, host string) (string, ownership, error) {
	orgID, err := a.targetOrg(ctx, c, requested)
	if err != nil {
		return "", ownership{}, err
	}
	own, err := a.ownership(ctx)
	if err != nil {
		return "", ownership{}, err
	}
	return orgID, own, own.check(orgID, host)
}

// exactHostname returns raw lowercased when it is an exact hostname, and
// a 400 otherwise; why says, for a wildcard, why one is not enough.
func exactHostname(raw, why string) (string, error) {
	host := strings.ToLower(raw)
	if err := hostname.Validate(host); err != nil {
		return "", errorf(http.StatusBadRequest, "hostname: %v", err)
	}
	if strings.HasPrefix(host, "*") {
		return "", errorf(http.StatusBadRequest, "%s is a wildcard: %s", host, why)
	}
	return host, nil
}

// truncate cuts s to at most n bytes, for quoting a caller's value in an
// error without echoing a huge one.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
