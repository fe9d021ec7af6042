package admin

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/router"
)

// explainWait bounds how long GET /explain waits for the autoscaler's
// records (only right after start, before its first load).
const explainWait = 5 * time.Second

// otherOrgClient stands for a client of another organization in an
// explanation shown to an admin key.
const otherOrgClient = "(another organization)"

// explainRequest answers GET /explain?host=&path=&ip=: what the server
// would do now with that request, step by step, without doing it.
//
// Scoping: the master token may explain any hostname. An admin key may
// explain a hostname whose bind its organization owns (one of its tokens'
// clients serves it, or it armed its scaling record), or, when no bind
// matches, a hostname one of its organization's live tokens may bind;
// anything else answers 404, exactly like a hostname nobody serves, so a key
// learns nothing of other organizations' routes. Clients of other
// organizations sharing the bind are shown without their ID and name,
// except to the organization that owns the hostname (see ownership), which
// sees every client serving it.
func (a *API) explainRequest(w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	host := hostname.Normalize(q.Get("host"))
	if host == "" {
		return errorf(http.StatusBadRequest, "host is required")
	}
	if err := hostname.Validate(host); err != nil || strings.HasPrefix(host, "*") {
		return errorf(http.StatusBadRequest, "host %q is not a hostname a visitor can ask for", q.Get("host"))
	}
	path := q.Get("path")
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n?#") {
		return errorf(http.StatusBadRequest, "path %q must start with / and hold no spaces, query or fragment", path)
	}
	var ip netip.Addr
	if s := q.Get("ip"); s != "" {
		var err error
		if ip, err = netip.ParseAddr(s); err != nil || ip.Zone() != "" {
			return errorf(http.StatusBadRequest, "ip %q is not an IP address", s)
		}
	}
	if a.explain == nil {
		return errorf(http.StatusNotFound, "explain is not available on this server")
	}
	// Explain waits only for the autoscaler's first load of its records,
	// right after start; bound it so that a store outage cannot hold the
	// request.
	ctx, cancel := context.WithTimeout(r.Context(), explainWait)
	defer cancel()
	ex := a.explain.Explain(ctx, host, path, ip)
	if !c.master {
		own, err := a.ownership(r.Context())
		if err != nil {
			return err
		}
		// The owner of the hostname sees every client serving it; any
		// other key sees its own and the rest redacted.
		if !own.owns(c.key.OrgID, host) {
			ok, err := a.owns(r, c, ex)
			if err != nil {
				return err
			}
			if !ok {
				return errorf(http.StatusNotFound, "hostname %s not found in your organization", host)
			}
			ex = redact(ex, c.key.OrgID)
		}
	}
	a.writeJSON(w, r, http.StatusOK, ex)
	return nil
}

// owns reports whether the key c may see the explanation of ex.Host.
func (a *API) owns(r *http.Request, c caller, ex router.Explanation) (bool, error) {
	if ex.Bind != "" {
		return slices.Contains(ex.OrgIDs, c.key.OrgID), nil
	}
	toks, err := a.store.ListTokens(r.Context(), c.key.OrgID)
	if err != nil {
		return false, err
	}
	now := a.now()
	for _, t := range toks {
		if t.RevokedAt != nil || t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
			continue
		}
		for _, p := range t.Hostnames {
			if hostname.Match(p, ex.Host) {
				return true, nil
			}
		}
	}
	return false, nil
}

// redact hides what another organization's clients are called (in the
// clients, the permit step and the verdict) and which organizations share
// the bind.
func redact(ex router.Explanation, orgID string) router.Explanation {
	ex.OrgIDs = []string{orgID}
	cs := make([]router.ExplainClient, len(ex.Clients))
	steps := slices.Clone(ex.Steps)
	for i, cl := range ex.Clients {
		if cl.OrgID != orgID {
			if v := "dispatch to client " + cl.Name + " (" + cl.ID + ")"; ex.Verdict == v {
				ex.Verdict = "dispatch to a client of " + otherOrgClient
			}
			for j := range steps {
				if steps[j].Name == router.StepPermit {
					steps[j].Detail = strings.ReplaceAll(steps[j].Detail, "client "+cl.Name+" ", "client "+otherOrgClient+" ")
				}
			}
			cl.ID, cl.Name, cl.OrgID = otherOrgClient, otherOrgClient, ""
		}
		cs[i] = cl
	}
	ex.Clients, ex.Steps = cs, steps
	return ex
}
