package admin

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aperio-dev/aperio/internal/visitor/access/oidc"
	"github.com/aperio-dev/aperio/store"
)

// EventOIDCSessionsRevoked is the audit event of POST
// /oidc/sessions/revoke.
const EventOIDCSessionsRevoked = "oidc_sessions_revoked"

// Bounds of a revocation request's user.
const (
	maxRevokeEmail   = 254
	maxRevokeSubject = 255
)

// revokeOIDCSessions is POST /oidc/sessions/revoke: every session of the
// services' OIDC login on one hostname the caller's organization owns,
// of one user (email or subject) or of everyone, issued until now, is
// refused from now on on every server sharing the store. The sessions
// themselves live in sealed cookies; the revocation is kept until the
// longest session it could end has expired (oidc.MaxSessionTTL).
func (a *API) revokeOIDCSessions(w http.ResponseWriter, r *http.Request, c caller) error {
	var req RevokeOIDCSessionsRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	host, err := exactHostname(req.Hostname, "sessions are issued on one exact hostname")
	if err != nil {
		return err
	}
	email := strings.ToLower(req.Email)
	n := 0
	for _, set := range []bool{email != "", req.Subject != "", req.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errorf(http.StatusBadRequest, "want exactly one of email, subject and all")
	}
	if err := checkRevokeUser("email", email, maxRevokeEmail); err != nil {
		return err
	}
	if err := checkRevokeUser("subject", req.Subject, maxRevokeSubject); err != nil {
		return err
	}
	orgID, _, err := a.ownedHost(r.Context(), c, req.OrgID, host)
	if err != nil {
		return err
	}
	rev, err := a.store.RevokeOIDCSessions(r.Context(), store.OIDCRevocation{
		Hostname: host, Email: email, Subject: req.Subject, ExpiresAt: a.now().Add(oidc.MaxSessionTTL),
	})
	if err != nil {
		return fmt.Errorf("revoke oidc sessions: %w", err)
	}
	if a.revs != nil {
		// In force here before the answer says so; an error leaves it to
		// the change feed (the revocation is stored) and says why.
		if err := a.revs.ReloadRevocations(r.Context(), host); err != nil {
			return fmt.Errorf("revoke oidc sessions: stored, not yet in force on this server: %w", err)
		}
	}
	who := "every user"
	switch {
	case email != "":
		who = "email " + email
	case req.Subject != "":
		who = "subject " + req.Subject
	}
	a.audit(r, store.AuditEntry{
		Event:    EventOIDCSessionsRevoked,
		Actor:    c.actor(),
		OrgID:    orgID,
		Hostname: host,
		Detail:   "sessions of " + who + " issued until " + rev.RevokedAt.Format("2006-01-02T15:04:05.000Z07:00"),
	})
	a.writeJSON(w, r, http.StatusOK, OIDCSessionsRevoked{Hostname: host, Email: email, Subject: req.Subject, All: req.All, RevokedAt: rev.RevokedAt})
	return nil
}

// checkRevokeUser bounds a revocation request's email or subject: at
// most limit bytes of printable UTF-8.
func checkRevokeUser(field, v string, limit int) error {
	if len(v) > limit {
		return errorf(http.StatusBadRequest, "%s: %d bytes, at most %d", field, len(v), limit)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return errorf(http.StatusBadRequest, "%s: must be printable UTF-8 text", field)
	}
	return nil
}
