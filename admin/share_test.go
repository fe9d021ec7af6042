package admin_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/admin"
)

// fakeShares mints links whose URL names what it was asked, and refuses
// a path with "bad" in it.
type fakeShares struct{}

func (fakeShares) Mint(_ *http.Request, host, path string, ttl time.Duration) (admin.ShareLink, string, error) {
	if strings.Contains(path, "bad") {
		return admin.ShareLink{}, "", errors.New("access: share path is not clean")
	}
	if path == "" {
		path = "/"
	}
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(ttl)
	return admin.ShareLink{URL: "https://" + host + path + "?aperio_share=tok", Hostname: host, Path: path, ExpiresAt: exp}, "nonce-1", nil
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
