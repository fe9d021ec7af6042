package admin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/hostname"
	"github.com/aperio-dev/aperio/internal/urlpath"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// EventScalingDeclaredByOperator is POST /scaling: a person declared a
// scaling block through the API (created or updated and re-armed the
// record), named apart from a client's declaration as
// EventScalingDisarmedByOperator is from the breaker's disarm.
const EventScalingDeclaredByOperator = "scaling_declared_by_operator"

// Bounds of POST /scaling's body.
const (
	// maxScalingBodyBytes bounds the whole body: every field's bound
	// below fits in it many times over.
	maxScalingBodyBytes = 16 << 10
	// maxScalingPathBytes bounds path, as a client's announcement is
	// bounded.
	maxScalingPathBytes = 1024
	// maxScalingDurationBytes bounds a duration's text ("1m30s").
	maxScalingDurationBytes = 32
	// maxScalingInstances bounds min and max: far above any pool, low
	// enough that no arithmetic on it overflows.
	maxScalingInstances = 100_000
)

// createScaling is POST /scaling: an operator arms autoscaling for a bind
// without running an instance first. The record is stored exactly as a
// client's declaration of the block would be (autoscale.Controller.Arm),
// with the caller as its armer; 201 when it is new, 200 when an existing
// record of the organization's bind was updated and re-armed.
func (a *API) createScaling(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.scaling == nil {
		return errorf(http.StatusNotFound, "autoscaling is off on this server (scaling: true turns it on)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxScalingBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "cannot read the request body: %v", err)
	}
	var req CreateScalingRequest
	if err := decodeBody(bytes.TrimSpace(body), &req, false); err != nil {
		return err
	}
	host, path, block, problems := a.checkScalingRequest(req)
	if len(problems) > 0 {
		return errorf(http.StatusBadRequest, "%s", strings.Join(problems, "; "))
	}
	orgID, _, err := a.ownedHost(r.Context(), c, req.OrgID, host)
	if err != nil {
		return err
	}
	v, created, err := a.scaling.Arm(r.Context(), autoscale.OperatorDeclaration{
		OrgID: orgID, Hostname: host, Path: path, Armer: c.actor().String(), Block: block,
	})
	var de *autoscale.DeclarationError
	switch {
	case errors.As(err, &de):
		return errorf(http.StatusBadRequest, "%s", strings.Join(de.Problems, "; "))
	case errors.Is(err, autoscale.ErrBindTaken):
		return errorf(http.StatusConflict, "%s%s is armed by another organization", host, path)
	case errors.Is(err, autoscale.ErrRecordLimit):
		return errorf(http.StatusConflict, "%v", err)
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "organization %q not found", orgID)
	case err != nil:
		return err
	}
	verb := "updated and re-armed"
	status := http.StatusOK
	if created {
		verb, status = "created", http.StatusCreated
	}
	a.audit(r, store.AuditEntry{
		Event:    EventScalingDeclaredByOperator,
		Actor:    c.actor(),
		OrgID:    orgID,
		Hostname: host,
		Detail: fmt.Sprintf("record %s %s path=%q origin=%s authenticated=%t min=%d max=%d", v.ID, verb, path,
			urlOrigin(v.URL), v.Authenticated, v.Min, v.Max),
	})
	h := a.scaling.History(v.ID)
	a.writeJSON(w, r, status, ScalingRecordDetail{
		ScalingRecord: v.Wire(),
		Decisions:     nonNil(h.Decisions),
		Series:        nonNil(h.Series),
	})
	return nil
}

// checkScalingRequest bounds and normalizes POST /scaling's body: the
// hostname lowercased and valid, the path in normal form, the durations
// parsed, every field within its bound, the URL permitted by the outbound
// policy. It returns every problem, each naming its field; the rules of
// the block itself (min ≤ max, target_utilization in (0,1], window and
// cooldown at least a second) are autoscale's, checked again by Arm.
func (a *API) checkScalingRequest(req CreateScalingRequest) (host, path string, d autoscale.Declaration, problems []string) {
	host = strings.ToLower(strings.TrimSpace(req.Hostname))
	switch {
	case host == "":
		problems = append(problems, "hostname is required")
	case len(host) > hostname.MaxLen:
		problems = append(problems, fmt.Sprintf("hostname is longer than %d bytes", hostname.MaxLen))
	default:
		if err := hostname.Validate(host); err != nil {
			problems = append(problems, fmt.Sprintf("hostname: %v", err))
		}
	}
	path, pathProblem := scalingPath(req.Path)
	if pathProblem != "" {
		problems = append(problems, pathProblem)
	}
	switch {
	case len(req.URL) > tunnel.MaxScalingURLBytes:
		problems = append(problems, fmt.Sprintf("url is longer than %d bytes", tunnel.MaxScalingURLBytes))
	default:
		problems = append(problems, a.checkWebhookURL(req.URL)...)
	}
	switch {
	case len(req.Secret) > maxSecretLen:
		problems = append(problems, fmt.Sprintf("secret is longer than %d bytes", maxSecretLen))
	case strings.IndexFunc(req.Secret, unicode.IsControl) >= 0:
		problems = append(problems, "secret contains control characters")
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"min", req.Min}, {"max", req.Max}} {
		if n.v < 0 || n.v > maxScalingInstances {
			problems = append(problems, fmt.Sprintf("%s: %d is not from 0 to %d", n.field, n.v, maxScalingInstances))
		}
	}
	if req.Max > 0 && req.Min > req.Max {
		problems = append(problems, fmt.Sprintf("max %d is below min %d", req.Max, req.Min))
	}
	if t := req.TargetUtilization; t < 0 || t > 1 {
		problems = append(problems, fmt.Sprintf("target_utilization: %v is not in (0,1]", t))
	}
	d = autoscale.Declaration{URL: req.URL, Secret: req.Secret, Min: req.Min, Max: req.Max, TargetUtilization: req.TargetUtilization}
	for _, f := range []struct {
		field, raw string
		dst        *time.Duration
		max        time.Duration // 0: none beyond autoscale's rules
	}{
		{"cold_start", req.ColdStart, &d.ColdStart, autoscale.MaxColdStart},
		{"window", req.Window, &d.Window, 0},
		{"cooldown", req.Cooldown, &d.Cooldown, 0},
	} {
		if p := scalingDuration(f.field, f.raw, f.dst, f.max); p != "" {
			problems = append(problems, p)
		}
	}
	return host, path, d, problems
}

// maxScalingDuration bounds window and cooldown: a day is far beyond any
// sensible rule, and keeps the backoff arithmetic small.
const maxScalingDuration = 24 * time.Hour

// scalingDuration parses raw, field's Go duration, into dst ("" leaves
// the zero that means the default) and returns its problem: unparsable,
// negative, or above max (maxScalingDuration when max is 0).
func scalingDuration(field, raw string, dst *time.Duration, max time.Duration) string {
	if raw == "" {
		return ""
	}
	if len(raw) > maxScalingDurationBytes {
		return fmt.Sprintf("%s is longer than %d bytes", field, maxScalingDurationBytes)
	}
	v, err := time.ParseDuration(raw)
	if max == 0 {
		max = maxScalingDuration
	}
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %q is not a duration (45s, 1m30s)", field, raw)
	case v < 0:
		return fmt.Sprintf("%s: %s is negative", field, raw)
	case v > max:
		return fmt.Sprintf("%s: %s is above the maximum of %s", field, raw, max)
	}
	*dst = v
	return ""
}

// scalingPath returns raw, a bind's path prefix, in normal form (as the
// router matches paths: empty segments collapsed, unreserved escapes
// decoded), and its problem: longer than maxScalingPathBytes, not
// starting with '/', or not a path a request could have ("" is fine: the
// whole hostname).
func scalingPath(raw string) (string, string) {
	switch {
	case raw == "":
		return "", ""
	case len(raw) > maxScalingPathBytes:
		return "", fmt.Sprintf("path is longer than %d bytes", maxScalingPathBytes)
	case raw[0] != '/':
		return "", "path must start with '/'"
	}
	norm, err := urlpath.Normal(raw)
	if err == nil {
		norm, err = urlpath.Key(norm)
	}
	if err != nil || strings.IndexFunc(norm, unicode.IsControl) >= 0 {
		return "", fmt.Sprintf("path %q is not a valid path prefix", truncate(raw, 64))
	}
	return norm, ""
}

// urlOrigin is raw's scheme and host, for the audit log: a hook URL's
// path or query can be a credential.
func urlOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host
}
