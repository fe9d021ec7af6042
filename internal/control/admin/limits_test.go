package admin_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/portspec"
)

func TestTokenLimitsCreateAndPatch(t *testing.T) {
	f := newFixture(t)
	org := f.org(t, "acme")
	f.own(t, org, "*.acme.test")
	adminKey := f.key(t, org, "admin").Secret
	var tok admin.MintedToken
	f.expect(t, "POST", "/tokens", adminKey, `{"name":"web","hostnames":["a.acme.test"],"max_rps":5,"daily_max_bytes":1000,
		"max_connections":2,"paths":["/api"],"client_allowed_ips":["10.1.2.3","192.168.0.0/16"]}`, http.StatusCreated, &tok)
	if tok.MaxRPS != 5 || tok.DailyMaxBytes != 1000 || tok.MaxConnections != 2 ||
		!slices.Equal(tok.Paths, []string{"/api"}) || !slices.Equal(tok.ClientAllowedIPs, []string{"10.1.2.3/32", "192.168.0.0/16"}) {
		t.Fatalf("POST /tokens limits = %+v, want them as sent (CIDRs normalized)", tok.TokenLimits)
	}

	var up admin.Token
	f.expect(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"name":"web-2","hostnames":["b.acme.test"],"max_rps":0,"paths":[]}`, http.StatusOK, &up)
	if up.Name != "web-2" || !slices.Equal(up.Hostnames, []string{"b.acme.test"}) || up.MaxRPS != 0 || len(up.Paths) != 0 ||
		up.MaxConnections != 2 || up.DailyMaxBytes != 1000 || up.Prefix != tok.Prefix {
		t.Errorf("PATCH /tokens = %+v, want the fields sent replaced and the others kept", up)
	}
	var list []admin.Token
	f.expect(t, "GET", "/tokens", adminKey, "", http.StatusOK, &list)
	if len(list) != 1 || list[0].Name != "web-2" {
		t.Errorf("GET /tokens after PATCH = %+v, want the edit stored", list)
	}
	if !slices.ContainsFunc(f.audit(t), func(e admin.AuditEntry) bool { return e.Event == admin.EventTokenUpdated }) {
		t.Error("PATCH /tokens was not audited as token_updated")
	}
	// A hostname outside the organization's is refused like at minting.
	f.expectError(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"hostnames":["other.example"]}`, http.StatusForbidden, "")
	// Clearing the expiry with "".
	f.expect(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"expires_at":"2099-01-01T00:00:00Z"}`, http.StatusOK, &up)
	if up.ExpiresAt == nil {
		t.Fatalf("PATCH expires_at = nil, want set")
	}
	f.expect(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"expires_at":""}`, http.StatusOK, &up)
	if up.ExpiresAt != nil {
		t.Errorf("PATCH expires_at \"\" = %v, want cleared", up.ExpiresAt)
	}
	f.expect(t, "DELETE", "/tokens/"+tok.ID, adminKey, "", http.StatusOK, nil)
	f.expectError(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"max_rps":1}`, http.StatusConflict, "revoked")
}

// TestTokenAllowTCPPorts: a token for public ports needs no hostname; its
// ports are stored canonical, replaced by PATCH and cleared by [].
func TestTokenAllowTCPPorts(t *testing.T) {
	f := newFixture(t).withConfig(t, admin.Config{TCPPortRange: []portspec.Range{{Lo: 2000, Hi: 30000}}})
	org := f.org(t, "acme")
	f.expect(t, "PUT", "/orgs/"+org+"/ports", masterToken, `{"ports":["2222","3000-3001","20000-20010"]}`, http.StatusOK, nil)
	adminKey := f.key(t, org, "admin").Secret
	var tok admin.MintedToken
	f.expect(t, "POST", "/tokens", adminKey, `{"name":"ssh","allow_tcp_ports":["2222"," 20000 - 20010 "]}`, http.StatusCreated, &tok)
	if !slices.Equal(tok.AllowTCPPorts, []string{"2222", "20000-20010"}) || len(tok.Hostnames) != 0 {
		t.Fatalf("POST /tokens allow_tcp_ports = %q hostnames %q, want [2222 20000-20010] and none", tok.AllowTCPPorts, tok.Hostnames)
	}
	var up admin.Token
	f.expect(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"allow_tcp_ports":["3000-3001"]}`, http.StatusOK, &up)
	if !slices.Equal(up.AllowTCPPorts, []string{"3000-3001"}) {
		t.Errorf("PATCH allow_tcp_ports = %q, want [3000-3001]", up.AllowTCPPorts)
	}
	f.expect(t, "PATCH", "/tokens/"+tok.ID, adminKey, `{"allow_tcp_ports":[]}`, http.StatusOK, &up)
	if up.AllowTCPPorts == nil || len(up.AllowTCPPorts) != 0 {
		t.Errorf("PATCH allow_tcp_ports [] = %#v, want an empty list", up.AllowTCPPorts)
	}
	// Without ports, hostnames or catch-all, a token serves nothing.
	f.expectError(t, "POST", "/tokens", adminKey, `{"name":"none"}`, http.StatusBadRequest, "hostnames")
}

// TestTokenLimitsHostile sends negative, absurd and malformed limits: each
// is refused with 400 naming its field, on creation and on edit.
func TestTokenLimitsHostile(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, masterToken, "app.example.com")
	cases := []struct{ body, field string }{
		{`"max_rps":-1`, "max_rps"},
		{`"max_rps":1e300`, "max_rps"},
		{`"daily_max_bytes":-1`, "daily_max_bytes"},
		{`"daily_max_bytes":9000000000000000000`, "daily_max_bytes"},
		{`"max_connections":-3`, "max_connections"},
		{`"max_connections":99999999`, "max_connections"},
		{`"paths":["api"]`, "paths[0]"},
		{`"paths":["/a/../b"]`, "paths[0]"},
		{`"paths":["/a?x=1"]`, "paths[0]"},
		{`"paths":["/` + strings.Repeat("a", 600) + `"]`, "paths[0]"},
		{`"paths":[` + strings.Repeat(`"/a",`, 64) + `"/a"]`, "paths"},
		{`"client_allowed_ips":["not-an-ip"]`, "client_allowed_ips[0]"},
		{`"client_allowed_ips":["10.0.0.1/8"]`, "client_allowed_ips[0]"},
		{`"allow_tcp_ports":["0"]`, "allow_tcp_ports"},
		{`"allow_tcp_ports":["65536"]`, "allow_tcp_ports"},
		{`"allow_tcp_ports":["2000-1000"]`, "allow_tcp_ports"},
		{`"allow_tcp_ports":["22,23"]`, "allow_tcp_ports"},
		{`"allow_tcp_ports":[` + strings.Repeat(`"22",`, 64) + `"22"]`, "allow_tcp_ports"},
	}
	for _, c := range cases {
		t.Run(c.field, func(t *testing.T) {
			f.expectError(t, "POST", "/tokens", masterToken, `{"name":"x","hostnames":["app.example.com"],`+c.body+`}`, http.StatusBadRequest, c.field)
			f.expectError(t, "PATCH", "/tokens/"+tok.ID, masterToken, `{`+c.body+`}`, http.StatusBadRequest, c.field)
		})
	}
	f.expectError(t, "PATCH", "/tokens/"+tok.ID, masterToken, `{"expires_at":"yesterday"}`, http.StatusBadRequest, "expires_at")
	f.expectError(t, "PATCH", "/tokens/tok_missing", masterToken, `{"name":"x"}`, http.StatusNotFound, "not found")
	f.expectError(t, "PATCH", "/tokens/"+tok.ID, masterToken, `{"max_rps":"fast"}`, http.StatusBadRequest, "")
}

func TestRotateToken(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, masterToken, "app.example.com")
	var rot admin.MintedToken
	f.expect(t, "POST", "/tokens/"+tok.ID+"/rotate", masterToken, `{"grace":"1h"}`, http.StatusOK, &rot)
	if rot.ID != tok.ID || rot.Secret == "" || rot.Secret == tok.Secret || !strings.HasPrefix(rot.Secret, "apr_") || rot.Prefix == tok.Prefix {
		t.Fatalf("rotate = %+v, want the same token with a new apr_ secret", rot)
	}
	if rot.PreviousExpiresAt == nil || rot.PreviousExpiresAt.Sub(rot.CreatedAt) < 59*time.Minute {
		t.Errorf("rotate previous_expires_at = %v, want about an hour from now", rot.PreviousExpiresAt)
	}
	if !slices.ContainsFunc(f.audit(t), func(e admin.AuditEntry) bool { return e.Event == admin.EventTokenRotated }) {
		t.Error("rotate was not audited as token_rotated")
	}
	f.expect(t, "POST", "/tokens/"+tok.ID+"/rotate", masterToken, "", http.StatusOK, &rot) // no body: no grace
	for _, g := range []string{"-1h", "31d", "soon", "1000000000000d"} {
		f.expectError(t, "POST", "/tokens/"+tok.ID+"/rotate", masterToken, `{"grace":"`+g+`"}`, http.StatusBadRequest, "grace")
	}
	f.expectError(t, "POST", "/tokens/tok_missing/rotate", masterToken, `{}`, http.StatusNotFound, "not found")
}

func TestOrgLimitsAndCaps(t *testing.T) {
	f := newFixture(t)
	org := f.org(t, "acme")
	f.own(t, org, "*.acme.test")
	adminKey := f.key(t, org, "admin").Secret
	var o admin.Org
	f.expect(t, "PATCH", "/orgs/"+org, masterToken, `{"max_tokens":1,"max_admin_keys":2,"max_clients":3,"monthly_max_bytes":5000}`, http.StatusOK, &o)
	if o.MaxTokens != 1 || o.MaxAdminKeys != 2 || o.MaxClients != 3 || o.MonthlyMaxBytes != 5000 {
		t.Fatalf("PATCH /orgs = %+v, want the limits sent", o.OrgLimits)
	}
	// Absent fields stay.
	f.expect(t, "PATCH", "/orgs/"+org, masterToken, `{"max_clients":4}`, http.StatusOK, &o)
	if o.MaxTokens != 1 || o.MaxClients != 4 {
		t.Errorf("PATCH /orgs {max_clients} = %+v, want max_tokens kept", o.OrgLimits)
	}
	f.expect(t, "POST", "/tokens", adminKey, `{"name":"a","hostnames":["a.acme.test"]}`, http.StatusCreated, nil)
	f.expectError(t, "POST", "/tokens", adminKey, `{"name":"b","hostnames":["b.acme.test"]}`, http.StatusConflict, "max_tokens")
	f.expect(t, "POST", "/admin-keys", adminKey, `{"name":"k2","role":"viewer"}`, http.StatusCreated, nil)
	f.expectError(t, "POST", "/admin-keys", adminKey, `{"name":"k3","role":"viewer"}`, http.StatusConflict, "max_admin_keys")
	// Only the master token sets limits, and only sane ones.
	f.expectError(t, "PATCH", "/orgs/"+org, adminKey, `{"max_tokens":100}`, http.StatusForbidden, "")
	for _, body := range []string{`{"max_tokens":-1}`, `{"max_clients":2000000}`, `{"monthly_max_bytes":-5}`, `{"max_admin_keys":-1}`} {
		f.expectError(t, "PATCH", "/orgs/"+org, masterToken, body, http.StatusBadRequest, strings.Split(strings.Trim(body, "{}\""), "\"")[0])
	}
	f.expectError(t, "PATCH", "/orgs/org_missing", masterToken, `{"max_tokens":1}`, http.StatusNotFound, "not found")
}

func TestAdminKeyExpiry(t *testing.T) {
	f := newFixture(t)
	var k admin.MintedKey
	f.expect(t, "POST", "/admin-keys", masterToken, `{"name":"short","role":"viewer","expires_in":"1h"}`, http.StatusCreated, &k)
	if k.ExpiresAt == nil {
		t.Fatalf("POST /admin-keys expires_in = %+v, want expires_at set", k.Key)
	}
	f.expect(t, "GET", "/tokens", k.Secret, "", http.StatusOK, nil)
	f.clock.Advance(time.Hour + time.Second)
	f.expectError(t, "GET", "/tokens", k.Secret, "", http.StatusUnauthorized, "")
	for _, body := range []string{
		`{"name":"x","role":"viewer","expires_in":"-1h"}`,
		`{"name":"x","role":"viewer","expires_in":"forever"}`,
		`{"name":"x","role":"viewer","expires_in":"100000d"}`,
		`{"name":"x","role":"viewer","expires_at":"2000-01-01T00:00:00Z"}`,
		`{"name":"x","role":"viewer","expires_in":"1h","expires_at":"2099-01-01T00:00:00Z"}`,
	} {
		f.expectError(t, "POST", "/admin-keys", masterToken, body, http.StatusBadRequest, "expires_")
	}
}
