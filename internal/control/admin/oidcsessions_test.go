package admin_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
)

// TestRevokeOIDCSessions: POST /oidc/sessions/revoke records, in the
// store every server follows, the end of a user's (or every) session on
// one hostname of the caller's organization, and audits it; every other
// request is refused with a reason.
func TestRevokeOIDCSessions(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	f.own(t, a, "*.a.test")
	op := f.key(t, a, "operator")

	var got admin.OIDCSessionsRevoked
	f.expect(t, "POST", "/oidc/sessions/revoke", op.Secret, `{"hostname":"Wiki.A.test","email":"Jane@Example.com"}`, http.StatusOK, &got)
	if got.Hostname != "wiki.a.test" || got.Email != "jane@example.com" || got.All || got.RevokedAt.IsZero() {
		t.Errorf("answer = %+v, want wiki.a.test, jane@example.com, a time", got)
	}
	f.expect(t, "POST", "/oidc/sessions/revoke", op.Secret, `{"hostname":"wiki.a.test","all":true}`, http.StatusOK, &got)
	rs, err := f.db.OIDCRevocations(context.Background(), "wiki.a.test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The hostname-wide revocation took the user's in.
	if len(rs) != 1 || rs[0].Email != "" || rs[0].Subject != "" || rs[0].SessionID != "" || rs[0].ExpiresAt.Before(time.Now().Add(29*24*time.Hour)) {
		t.Errorf("stored revocations = %+v, want one of every session, kept 30 days", rs)
	}
	var audited bool
	for _, e := range f.audit(t) {
		audited = audited || e.Event == admin.EventOIDCSessionsRevoked && e.Hostname == "wiki.a.test" && strings.Contains(e.Detail, "every user")
	}
	if !audited {
		t.Error("no oidc_sessions_revoked audit entry for wiki.a.test")
	}

	for _, tc := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"no user", `{"hostname":"wiki.a.test"}`, 400, "exactly one of email, subject and all"},
		{"two users", `{"hostname":"wiki.a.test","email":"j@x.test","subject":"123"}`, 400, "exactly one"},
		{"email and all", `{"hostname":"wiki.a.test","email":"j@x.test","all":true}`, 400, "exactly one"},
		{"wildcard", `{"hostname":"*.a.test","all":true}`, 400, "wildcard"},
		{"bad hostname", `{"hostname":"a..test","all":true}`, 400, "hostname"},
		{"IP", `{"hostname":"192.0.2.1","all":true}`, 400, "hostname"},
		{"long email", `{"hostname":"wiki.a.test","email":"` + strings.Repeat("e", 255) + `"}`, 400, "at most 254"},
		{"control character", `{"hostname":"wiki.a.test","subject":"a\u0000b"}`, 400, "printable"},
		{"unknown field", `{"hostname":"wiki.a.test","all":true,"user":"x"}`, 400, "user"},
		{"another organization's hostname", `{"hostname":"wiki.b.test","all":true}`, 403, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.expectError(t, "POST", "/oidc/sessions/revoke", op.Secret, tc.body, tc.status, tc.msg)
		})
	}
	viewer := f.key(t, a, "viewer")
	f.expectError(t, "POST", "/oidc/sessions/revoke", viewer.Secret, `{"hostname":"wiki.a.test","all":true}`, http.StatusForbidden, "")
}

// revocationRecorder is an admin.RevocationFollower that records the
// hostnames it was told about, and fails when err is set.
type revocationRecorder struct {
	mu    sync.Mutex
	hosts []string
	err   error
}

func (r *revocationRecorder) ReloadRevocations(_ context.Context, host string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts = append(r.hosts, host)
	return r.err
}

func (r *revocationRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hosts)
}

// TestRevokeInForceBeforeAnswer: the server answering POST
// /oidc/sessions/revoke has the revocation in force before it answers
// (its follower is told while the request is served, not later through
// the change feed); a follower that cannot load it makes the answer a
// 500 that says the revocation is stored but not yet in force, and a
// refused request tells it nothing.
func TestRevokeInForceBeforeAnswer(t *testing.T) {
	f := newFixture(t)
	a := f.org(t, "a")
	f.own(t, a, "*.a.test")
	op := f.key(t, a, "operator")
	rec := &revocationRecorder{}
	g := f.withConfig(t, admin.Config{Revocations: rec})

	g.expect(t, "POST", "/oidc/sessions/revoke", op.Secret, `{"hostname":"wiki.a.test","email":"jane@example.com"}`, http.StatusOK, nil)
	if got := rec.seen(); !slices.Equal(got, []string{"wiki.a.test"}) {
		t.Errorf("follower told %v by the time the answer came, want [wiki.a.test]", got)
	}
	g.expect(t, "POST", "/oidc/sessions/revoke", op.Secret, `{"hostname":"wiki.b.test","all":true}`, http.StatusForbidden, nil)
	if got := rec.seen(); len(got) != 1 {
		t.Errorf("a refused revocation told the follower: %v", got)
	}

	rec.err = errors.New("store unreachable")
	var e struct{ Error string }
	g.expect(t, "POST", "/oidc/sessions/revoke", op.Secret, `{"hostname":"wiki.a.test","all":true}`, http.StatusInternalServerError, &e)
	if rs, err := f.db.OIDCRevocations(context.Background(), "wiki.a.test", time.Now()); err != nil || len(rs) != 1 || rs[0].Email != "" {
		t.Errorf("after the follower failed the store holds %+v, %v; want the hostname-wide revocation stored", rs, err)
	}
}
