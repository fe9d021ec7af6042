package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
)

// fakeShares mints links whose URL names what it was asked, and refuses
// a path with "bad" in it. When rotated is set, it records the
// organizations whose key it rotated.
type fakeShares struct {
	rotated *rotations
}

// rotations records RotateKey calls.
type rotations struct {
	mu   sync.Mutex // guards orgs
	orgs []string
}

func (r *rotations) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.orgs)
}

func (fakeShares) Mint(_ *http.Request, _, host, path string, ttl time.Duration) (admin.ShareLink, string, error) {
	if strings.Contains(path, "bad") {
		return admin.ShareLink{}, "", fmt.Errorf("%w: access: share path is not clean", admin.ErrBadShare)
	}
	if path == "" {
		path = "/"
	}
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(ttl)
	return admin.ShareLink{URL: "https://" + host + path + "?aperio_share=tok", Hostname: host, Path: path, ExpiresAt: exp}, "nonce-1", nil
}

func (f fakeShares) RotateKey(_ context.Context, orgID string, revoke bool) (admin.ShareKey, error) {
	if f.rotated != nil {
		f.rotated.mu.Lock()
		f.rotated.orgs = append(f.rotated.orgs, orgID)
		f.rotated.mu.Unlock()
	}
	return admin.ShareKey{ID: "sk_new", OrgID: orgID, Generation: 2, RevokedPrevious: revoke, CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
}

// TestRotateShareKey: POST /share/keys/rotate rotates the caller's own
// organization's key and audits it; viewers and operators are refused, an
// admin key cannot name another organization (and rotates nothing), the
// master token may; hostile bodies are refused; a server without share
// links answers 404.
func TestRotateShareKey(t *testing.T) {
	base := newFixture(t)
	rot := &rotations{}
	f := base.withConfig(t, admin.Config{Shares: fakeShares{rotated: rot}})
	a, b := f.org(t, "a"), f.org(t, "b")
	for _, role := range []string{"viewer", "operator"} {
		f.expect(t, "POST", "/share/keys/rotate", f.key(t, a, role).Secret, `{}`, http.StatusForbidden, nil)
	}
	adminA := f.key(t, a, "admin").Secret
	var key admin.ShareKey
	f.expect(t, "POST", "/share/keys/rotate", adminA, `{"revoke_previous":true}`, http.StatusOK, &key)
	if key.OrgID != a || !key.RevokedPrevious || key.ID != "sk_new" {
		t.Errorf("rotate as a's admin = %+v, want a's key, previous revoked", key)
	}
	f.expectError(t, "POST", "/share/keys/rotate", adminA, `{"org_id":"`+b+`"}`, http.StatusBadRequest, "org_id may only be set with the master token")
	f.expect(t, "POST", "/share/keys/rotate", masterToken, `{"org_id":"`+b+`"}`, http.StatusOK, &key)
	if key.OrgID != b || key.RevokedPrevious {
		t.Errorf("rotate as master naming b = %+v, want b's key, previous kept", key)
	}
	if got, want := rot.list(), []string{a, b}; !slices.Equal(got, want) {
		t.Errorf("organizations rotated = %v, want %v: never b for a's admin", got, want)
	}
	var audit []map[string]any
	f.expect(t, "GET", "/audit", masterToken, "", http.StatusOK, &audit)
	var details []string
	for _, e := range audit {
		if e["event"] == admin.EventShareKeyRotated {
			d, _ := e["detail"].(string)
			details = append(details, fmt.Sprint(e["org_id"], " ", d))
		}
	}
	if want := []string{b + " key sk_new, generation 2, previous kept", a + " key sk_new, generation 2, previous revoked"}; !slices.Equal(details, want) {
		t.Errorf("share_key_rotated entries = %q, want %q", details, want)
	}
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"revoke_previous":"yes"}`, http.StatusBadRequest, "revoke_previous"},
		{`{"revoke":true}`, http.StatusBadRequest, `unknown field "revoke"`},
		{`{"revoke_previous":true,"revoke_previous":false}`, http.StatusBadRequest, "duplicate field"},
		{`{"org_id":"org_nope"}`, http.StatusNotFound, "not found"},
		{`{"org_id":"` + strings.Repeat("x", admin.MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge, "larger than"},
	} {
		f.expectError(t, "POST", "/share/keys/rotate", masterToken, tc.body, tc.status, tc.want)
	}
	if got := len(rot.list()); got != 2 {
		t.Errorf("rotations after hostile bodies = %d, want still 2", got)
	}
	base.expectError(t, "POST", "/share/keys/rotate", masterToken, `{}`, http.StatusNotFound, "share links are off")
}

// TestCreateShare: POST /share mints a link for an owned hostname and
// audits it without the token; bad input is refused with 400, and a
// server without share links answers 404.
func TestCreateShare(t *testing.T) {
	base := newFixture(t)
	f := base.withConfig(t, admin.Config{Shares: fakeShares{}})
	var link admin.ShareLink
	f.expect(t, "POST", "/share", masterToken, `{"hostname":"App.Example.com","path":"/docs","ttl":"2h"}`, http.StatusCreated, &link)
	if link.Hostname != "app.example.com" || link.Path != "/docs" || !strings.Contains(link.URL, "aperio_share=") {
		t.Fatalf("link = %+v, want app.example.com /docs with a token", link)
	}
	var audit []map[string]any
	f.expect(t, "GET", "/audit", masterToken, "", http.StatusOK, &audit)
	found := false
	for _, e := range audit {
		if e["event"] == admin.EventShareCreated {
			found = true
			d, _ := e["detail"].(string)
			if e["hostname"] != "app.example.com" || !strings.Contains(d, "path /docs") || !strings.Contains(d, "nonce-1") || strings.Contains(d, "tok") {
				t.Errorf("share_created entry = %v, want hostname, path and nonce, never the token", e)
			}
		}
	}
	if !found {
		t.Fatal("no share_created audit entry")
	}
	for _, tc := range []struct{ body, want string }{
		{`{"hostname":"*.example.com","ttl":"1h"}`, "wildcard"},
		{`{"hostname":"app.example.com","ttl":"soon"}`, "not a positive duration"},
		{`{"hostname":"app.example.com","ttl":"-1h"}`, "not a positive duration"},
		{`{"hostname":"app.example.com"}`, "not a positive duration"},
		{`{"hostname":"bad host","ttl":"1h"}`, "hostname"},
		{`{"hostname":"app.example.com","path":"/bad","ttl":"1h"}`, "not clean"},
		{`{"hostname":"app.example.com","ttl":"1h","token":"x"}`, `unknown field "token"`},
	} {
		f.expectError(t, "POST", "/share", masterToken, tc.body, http.StatusBadRequest, tc.want)
	}
	base.expectError(t, "POST", "/share", masterToken, `{"hostname":"app.example.com","ttl":"1h"}`, http.StatusNotFound, "share links are off")
}
