package admin

import (
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/internal/portspec"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/store"
)

// Audit events of token edits, rotations and organization limits.
const (
	EventTokenUpdated = "token_updated"
	EventTokenRotated = apitype.EventTokenRotated
	EventOrgLimitsSet = "org_limits_set"
)

// Bounds of the lifecycle settings.
const (
	// maxRotateGrace bounds the grace of a rotation.
	maxRotateGrace = 30 * 24 * time.Hour
	// maxKeyLifetime bounds an admin key's expires_in and expires_at.
	maxKeyLifetime = 10 * 365 * 24 * time.Hour
	// maxTokenPathLen bounds one path prefix of a token, in bytes.
	maxTokenPathLen = 512
)

// parseSpan reads a duration as every setting does: Go syntax, or a whole
// number of days ("2d").
func parseSpan(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("%q is not a duration", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 1h, 90m, 2d)", s)
	}
	return d, nil
}

// validExpiry reads expires_at: "" is never, else an RFC 3339 time in the
// future; the second result is the problem, "" when none.
func validExpiry(s string, now time.Time) (*time.Time, string) {
	if s == "" {
		return nil, ""
	}
	t, err := time.Parse(time.RFC3339, s)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("expires_at %q is not an RFC 3339 time (like 2030-01-02T15:04:05Z)", s)
	case !t.After(now):
		return nil, fmt.Sprintf("expires_at %s is not in the future", s)
	}
	return &t, ""
}

// keyExpiry reads an admin key's expires_in or expires_at.
func keyExpiry(req CreateKeyRequest, now time.Time) (*time.Time, string) {
	switch {
	case req.ExpiresIn != "" && req.ExpiresAt != nil:
		return nil, "expires_in and expires_at: set at most one"
	case req.ExpiresIn != "":
		d, err := parseSpan(req.ExpiresIn)
		if err != nil || d <= 0 || d > maxKeyLifetime {
			return nil, fmt.Sprintf("expires_in %q: want a duration above 0 and at most %s", req.ExpiresIn, maxKeyLifetime)
		}
		t := now.Add(d)
		return &t, ""
	case req.ExpiresAt != nil:
		if !req.ExpiresAt.After(now) || req.ExpiresAt.Sub(now) > maxKeyLifetime {
			return nil, fmt.Sprintf("expires_at %s: want a time in the future, at most %s away", req.ExpiresAt.Format(time.RFC3339), maxKeyLifetime)
		}
		return req.ExpiresAt, ""
	}
	return nil, ""
}

// validTokenLimits checks l as the API accepts it, naming each field
// wrong, and returns it with its lists normalized.
func validTokenLimits(l store.TokenLimits) (store.TokenLimits, []string) {
	var problems []string
	if err := l.Validate(); err != nil {
		for _, e := range splitJoined(err) {
			problems = append(problems, e.Error())
		}
	}
	paths, pathProblems := validPaths(l.Paths)
	problems = append(problems, pathProblems...)
	ips, ipProblems := validCIDRs("client_allowed_ips", l.ClientAllowedIPs, store.MaxTokenClientIPs)
	problems = append(problems, ipProblems...)
	l.Paths, l.ClientAllowedIPs = paths, ips
	l.AllowTCPPorts = canonicalPorts(l.AllowTCPPorts)
	return l, problems
}

// splitJoined returns the errors errors.Join put together, or err alone.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// validPaths checks a token's path prefixes: each starts with "/", has no
// query, fragment, dot segment, empty segment or control character, and
// no trailing "/" (but "/" itself).
func validPaths(paths []string) ([]string, []string) {
	if len(paths) > store.MaxTokenPaths {
		return nil, []string{fmt.Sprintf("paths: %d entries, at most %d", len(paths), store.MaxTokenPaths)}
	}
	var out, problems []string
	for i, p := range paths {
		if why := pathProblem(p); why != "" {
			problems = append(problems, fmt.Sprintf("paths[%d] %.64q: %s", i, p, why))
			continue
		}
		out = append(out, p)
	}
	return out, problems
}

func pathProblem(p string) string {
	switch {
	case len(p) > maxTokenPathLen:
		return fmt.Sprintf("longer than %d bytes", maxTokenPathLen)
	case !strings.HasPrefix(p, "/"):
		return `does not start with "/"`
	case strings.ContainsAny(p, "?#\\") || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "has a query, fragment, backslash or control character"
	case p != "/" && strings.HasSuffix(p, "/"):
		return `ends with "/": name the prefix without it`
	}
	for seg := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if p != "/" && (seg == "" || seg == "." || seg == "..") {
			return "has an empty or dot segment"
		}
	}
	return ""
}

func (a *API) updateToken(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	var req UpdateTokenRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	t, err := a.store.Token(r.Context(), c.scope(), id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "token %q not found", id)
	}
	if err != nil {
		return err
	}
	now := a.now()
	e, problems := applyTokenEdit(store.EditOf(t), req, now)
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	own, err := a.ownership(r.Context())
	if err != nil {
		return err
	}
	for _, h := range e.Hostnames {
		if err := own.check(t.OrgID, h); err != nil {
			return err
		}
	}
	if err := a.checkTokenPorts(r.Context(), t.OrgID, e.Limits.AllowTCPPorts); err != nil {
		return err
	}
	t, err = a.store.UpdateToken(r.Context(), t.OrgID, id, e)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "token %q not found", id)
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, "token %q is revoked", id)
	case err != nil:
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventTokenUpdated,
		Actor:  c.actor(),
		OrgID:  t.OrgID,
		Detail: fmt.Sprintf("token %s name=%q hostnames=%s paths=%s max_rps=%g max_connections=%d daily_max_bytes=%d", t.ID, t.Name, auditList(t.Hostnames), auditList(t.Limits.Paths), t.Limits.MaxRPS, t.Limits.MaxConnections, t.Limits.DailyMaxBytes),
	})
	a.writeJSON(w, r, http.StatusOK, tokenOf(t, now))
	return nil
}

// applyTokenEdit returns e with the fields req sets replaced, and every
// problem with them, each naming its field.
func applyTokenEdit(e store.TokenEdit, req UpdateTokenRequest, now time.Time) (store.TokenEdit, []string) {
	var problems []string
	if req.Name != nil {
		name, err := validName("name", *req.Name)
		if err != nil {
			problems = append(problems, err.Error())
		}
		e.Name = name
	}
	if req.AllowCatchAll != nil {
		e.AllowCatchAll = *req.AllowCatchAll
	}
	if req.Hostnames != nil || req.AllowCatchAll != nil {
		in := e.Hostnames
		if req.Hostnames != nil {
			in = *req.Hostnames
		}
		hosts, hostProblems := validPatterns("hostnames", in, maxTokenHostnames, !e.AllowCatchAll)
		problems = append(problems, hostProblems...)
		e.Hostnames = hosts
	}
	if req.AllowedIPs != nil {
		ips, ipProblems := validAllowedIPs(*req.AllowedIPs)
		problems = append(problems, ipProblems...)
		e.AllowedIPs = ips
	}
	if req.ExpiresAt != nil {
		exp, why := validExpiry(*req.ExpiresAt, now)
		if why != "" {
			problems = append(problems, why)
		}
		e.ExpiresAt = exp
	}
	l := e.Limits
	if req.MaxRPS != nil {
		l.MaxRPS = *req.MaxRPS
	}
	if req.DailyMaxBytes != nil {
		l.DailyMaxBytes = *req.DailyMaxBytes
	}
	if req.MaxConnections != nil {
		l.MaxConnections = *req.MaxConnections
	}
	if req.Paths != nil {
		l.Paths = *req.Paths
	}
	if req.ClientAllowedIPs != nil {
		l.ClientAllowedIPs = *req.ClientAllowedIPs
	}
	if req.AllowTCPPorts != nil {
		l.AllowTCPPorts = *req.AllowTCPPorts
	}
	l, limitProblems := validTokenLimits(l)
	problems = append(problems, limitProblems...)
	e.Limits = l
	return e, problems
}

func (a *API) rotateToken(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	var req RotateTokenRequest
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	var grace time.Duration
	if req.Grace != "" {
		d, err := parseSpan(req.Grace)
		if err != nil || d < 0 || d > maxRotateGrace {
			return errorf(http.StatusBadRequest, "grace %.64q: want a duration from 0 to %s", req.Grace, maxRotateGrace)
		}
		grace = d
	}
	t, err := a.store.Token(r.Context(), c.scope(), id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "token %q not found", id)
	}
	if err != nil {
		return err
	}
	now := a.now()
	m := mint(tokenPrefix)
	t, err = a.store.RotateToken(r.Context(), t.OrgID, id, m.hash, m.prefix, now.Add(grace))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "token %q not found", id)
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, "token %q is revoked", id)
	case err != nil:
		return err
	}
	f := tokenFields(t)
	f["generation"], f["grace_seconds"] = t.Generation, int64(grace/time.Second)
	a.emit(r, events.Event{
		Kind:   EventTokenRotated,
		Actor:  c.actor(),
		OrgID:  t.OrgID,
		Detail: fmt.Sprintf("token %s name=%q generation=%d grace=%s", t.ID, t.Name, t.Generation, grace),
		Fields: f,
	})
	a.writeJSON(w, r, http.StatusOK, MintedToken{Token: tokenOf(t, now), Secret: m.secret})
	return nil
}

func (a *API) updateOrg(w http.ResponseWriter, r *http.Request, c caller) error {
	id := pathParam(r, "id")
	var req UpdateOrgRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	o, err := a.store.Org(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "organization %q not found", id)
	}
	if err != nil {
		return err
	}
	l := o.Limits
	if req.MonthlyMaxBytes != nil {
		l.MonthlyMaxBytes = *req.MonthlyMaxBytes
	}
	if req.MaxClients != nil {
		l.MaxClients = *req.MaxClients
	}
	if req.MaxTokens != nil {
		l.MaxTokens = *req.MaxTokens
	}
	if req.MaxAdminKeys != nil {
		l.MaxAdminKeys = *req.MaxAdminKeys
	}
	if err := l.Validate(); err != nil {
		var problems []string
		for _, e := range splitJoined(err) {
			problems = append(problems, e.Error())
		}
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	o, err = a.store.SetOrgLimits(r.Context(), id, l)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, "organization %q not found", id)
	}
	if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventOrgLimitsSet,
		Actor:  c.actor(),
		OrgID:  o.ID,
		Detail: fmt.Sprintf("org %s monthly_max_bytes=%d max_clients=%d max_tokens=%d max_admin_keys=%d", o.ID, l.MonthlyMaxBytes, l.MaxClients, l.MaxTokens, l.MaxAdminKeys),
	})
	a.writeJSON(w, r, http.StatusOK, orgOf(o))
	return nil
}

// canonicalPorts returns the port specs as portspec prints them ("80",
// "2000-2100"), or specs unchanged when one fails to parse: Validate has
// named it already.
func canonicalPorts(specs []string) []string {
	rs, err := portspec.ParseList(specs)
	if err != nil {
		return specs
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}
