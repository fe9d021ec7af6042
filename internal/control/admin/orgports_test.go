package admin_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/portspec"
)

// TestOrgPortsAPI (#38, F1): the master token assigns port ranges to
// organizations with PUT /orgs/{id}/ports (merged, audited org_ports_set,
// 409 naming the owner on overlap, 400 on bad specs); an organization's
// keys read their own with GET, not another's (404), and may not set
// them (403).
func TestOrgPortsAPI(t *testing.T) {
	f := newFixture(t)
	a, b := f.org(t, "a"), f.org(t, "b")
	var got admin.OrgPorts
	f.expect(t, "PUT", "/orgs/"+a+"/ports", masterToken, `{"ports":["20050-20099","2222","20000-20049"]}`, http.StatusOK, &got)
	if got.OrgID != a || !slices.Equal(got.Ports, []string{"2222", "20000-20099"}) {
		t.Errorf("PUT /orgs/a/ports = %+v, want [2222 20000-20099]", got)
	}
	if !slices.ContainsFunc(f.audit(t), func(e admin.AuditEntry) bool {
		return e.Event == admin.EventOrgPortsSet && e.OrgID == a && strings.Contains(e.Detail, "20000-20099")
	}) {
		t.Error("PUT /orgs/{id}/ports was not audited as org_ports_set")
	}
	viewerA := f.key(t, a, "viewer").Secret
	adminA := f.key(t, a, "admin").Secret
	f.expect(t, "GET", "/orgs/"+a+"/ports", viewerA, "", http.StatusOK, &got)
	if !slices.Equal(got.Ports, []string{"2222", "20000-20099"}) {
		t.Errorf("GET /orgs/a/ports = %+v", got)
	}
	f.expectError(t, "GET", "/orgs/"+b+"/ports", viewerA, "", http.StatusNotFound, "not found")
	f.expectError(t, "PUT", "/orgs/"+a+"/ports", adminA, `{"ports":["1-65535"]}`, http.StatusForbidden, "")

	// Overlaps are refused naming the owner, whatever their shape.
	for _, spec := range []string{"2222", "20099-20100", "1-65535", "19999-20000"} {
		f.expectError(t, "PUT", "/orgs/"+b+"/ports", masterToken, `{"ports":["30000",`+strconv.Quote(spec)+`]}`, http.StatusConflict, "owned by organization "+a)
	}
	f.expect(t, "GET", "/orgs/"+b+"/ports", masterToken, "", http.StatusOK, &got)
	if len(got.Ports) != 0 {
		t.Errorf("GET /orgs/b/ports after refusals = %+v, want none", got)
	}
	for _, body := range []string{`{"ports":["0"]}`, `{"ports":["65536"]}`, `{"ports":["9-8"]}`, `{"ports":["22,23"]}`, `{"ports":"22"}`,
		`{"ports":[` + strings.Repeat(`"22",`, 64) + `"22"]}`, `{"ports":["22"],"ports":["23"]}`, `{"prots":["22"]}`} {
		f.expectError(t, "PUT", "/orgs/"+b+"/ports", masterToken, body, http.StatusBadRequest, "")
	}
	f.expectError(t, "PUT", "/orgs/org_nope/ports", masterToken, `{"ports":["22"]}`, http.StatusNotFound, "not found")
	// Clearing frees the ports.
	f.expect(t, "PUT", "/orgs/"+a+"/ports", masterToken, `{"ports":[]}`, http.StatusOK, &got)
	f.expect(t, "PUT", "/orgs/"+b+"/ports", masterToken, `{"ports":["2222"]}`, http.StatusOK, &got)
}

// TestTokenPortsOwnership (#38, F1): a token's allow_tcp_ports lie inside
// the server's tcp_port_range (400 naming the spec) and inside its
// organization's ports (403 naming the spec), at minting and at PATCH;
// the default organization without ports may name any port nobody owns;
// another organization without ports may name none.
func TestTokenPortsOwnership(t *testing.T) {
	f := newFixture(t).withConfig(t, admin.Config{TCPPortRange: []portspec.Range{{Lo: 20000, Hi: 29999}}})
	a, b, c := f.org(t, "a"), f.org(t, "b"), f.org(t, "c")
	f.expect(t, "PUT", "/orgs/"+a+"/ports", masterToken, `{"ports":["20000-20099"]}`, http.StatusOK, nil)
	f.expect(t, "PUT", "/orgs/"+b+"/ports", masterToken, `{"ports":["21000-21099"]}`, http.StatusOK, nil)
	adminA, adminB, adminC := f.key(t, a, "admin").Secret, f.key(t, b, "admin").Secret, f.key(t, c, "admin").Secret
	mint := func(ports string) string { return `{"name":"p","allow_tcp_ports":` + ports + `}` }
	var tok admin.MintedToken
	f.expect(t, "POST", "/tokens", adminA, mint(`["20000-20010","20099"]`), http.StatusCreated, &tok)
	cases := []struct {
		name, cred, ports string
		status            int
		msg               string
	}{
		// The probe: b's admin mints a token for a's ports.
		{"another org's ports", adminB, `["20000-20099"]`, http.StatusForbidden, "allow_tcp_ports 20000-20099 is not among the ports organization " + b + " owns"},
		{"straddling its own", adminA, `["20050-20150"]`, http.StatusForbidden, "allow_tcp_ports 20050-20150 is not among the ports organization " + a},
		{"unowned port", adminA, `["25000"]`, http.StatusForbidden, "allow_tcp_ports 25000"},
		{"outside the range", adminA, `["2222"]`, http.StatusBadRequest, "allow_tcp_ports 2222 is outside the server's tcp_port_range 20000-29999"},
		{"everything", adminB, `["1-65535"]`, http.StatusBadRequest, "allow_tcp_ports 1-65535 is outside"},
		{"the server's own port", adminB, `["8080"]`, http.StatusBadRequest, "outside"},
		{"org without ports", adminC, `["25000"]`, http.StatusForbidden, "owns no ports"},
		{"default org, another's port", masterToken, `["21050"]`, http.StatusForbidden, "allow_tcp_ports 21050"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.expectError(t, "POST", "/tokens", tc.cred, mint(tc.ports), tc.status, tc.msg)
			cred := tc.cred
			target := tok.ID
			if cred != adminA {
				var own admin.MintedToken
				f.expect(t, "POST", "/tokens", cred, `{"name":"h","allow_catch_all":true}`, http.StatusCreated, &own)
				target = own.ID
			}
			f.expectError(t, "PATCH", "/tokens/"+target, cred, `{"allow_tcp_ports":`+tc.ports+`}`, tc.status, tc.msg)
		})
	}
	// The default organization without ports keeps first come on ports
	// nobody owns; the master token minting in a names a's ports.
	f.expect(t, "POST", "/tokens", masterToken, mint(`["25000-25010"]`), http.StatusCreated, nil)
	f.expect(t, "POST", "/tokens", masterToken, `{"name":"m","allow_tcp_ports":["20050"],"org_id":"`+a+`"}`, http.StatusCreated, nil)
	f.expectError(t, "POST", "/tokens", masterToken, `{"name":"m","allow_tcp_ports":["21050"],"org_id":"`+a+`"}`, http.StatusForbidden, "21050")
	// A server without tcp_port_range takes no port in a token.
	off := f.withConfig(t, admin.Config{})
	off.expectError(t, "POST", "/tokens", adminA, mint(`["20000"]`), http.StatusBadRequest, "tcp_port_range is off")
}
