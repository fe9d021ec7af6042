package admin_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// tenants is the world of the hostile cases: organization a owns
// shop.a.test and everything below a.test, b owns everything below b.test,
// c owns nothing; each has keys of every role it needs.
type tenants struct {
	f                    *fixture
	a, b, c              string
	viewerA, opA, adminA string
	opB, adminB, adminC  string
	shop                 string // a's live hostname
	legacyB              string // a token of b for shop, minted before ownership existed
	legacyBID            string
}

func newTenants(t *testing.T) *tenants {
	t.Helper()
	f := newFixture(t)
	e := &tenants{f: f, shop: "shop.a.test"}
	e.a, e.b, e.c = f.org(t, "a"), f.org(t, "b"), f.org(t, "c")
	f.own(t, e.a, "shop.a.test", "*.a.test")
	f.own(t, e.b, "*.b.test")
	e.viewerA, e.opA, e.adminA = f.key(t, e.a, admin.RoleViewer).Secret, f.key(t, e.a, admin.RoleOperator).Secret, f.key(t, e.a, admin.RoleAdmin).Secret
	e.opB, e.adminB = f.key(t, e.b, admin.RoleOperator).Secret, f.key(t, e.b, admin.RoleAdmin).Secret
	e.adminC = f.key(t, e.c, admin.RoleAdmin).Secret
	// The store takes what it is given: this is a token minted for a's
	// hostname before hostname ownership was assigned.
	e.legacyB = "apr_legacyb0000000000000000000000000000000000000000000"
	sum := sha256.Sum256([]byte(e.legacyB))
	tok, err := f.db.CreateToken(t.Context(), store.Token{OrgID: e.b, Name: "legacy", Prefix: e.legacyB[:8], Hash: sum[:], Hostnames: []string{e.shop}})
	if err != nil {
		t.Fatalf("CreateToken(legacy) = %v", err)
	}
	e.legacyBID = tok.ID
	return e
}

// tokenBody is a POST /tokens body naming hosts.
func tokenBody(t *testing.T, hosts ...string) string {
	return jsonOf(t, admin.CreateTokenRequest{Name: "t", Hostnames: hosts})
}

// maintenanceOf returns the hostnames GET /maintenance shows cred.
func (e *tenants) maintenanceOf(t *testing.T, cred string) map[string]string {
	var ms []admin.Maintenance
	e.f.expect(t, "GET", "/maintenance", cred, "", http.StatusOK, &ms)
	out := map[string]string{}
	for _, m := range ms {
		out[m.Hostname] = m.OrgID
	}
	return out
}

// TestHostileAdmin: what an organization's keys and clients try against
// another organization's hostnames, and oversize or ambiguous input. Each
// case's name starts with the class of attack it guards against.
func TestHostileAdmin(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *tenants)
	}{
		// Maintenance takeover.
		{"guard/cross-org/operator-of-b-puts-a-hostname-in-maintenance", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "PUT", "/maintenance/"+e.shop, e.opB, "", http.StatusForbidden, "not among the hostnames")
			if ms := e.maintenanceOf(t, masterToken); len(ms) != 0 {
				t.Errorf("maintenance after the refusal = %v, want none", ms)
			}
		}},
		{"guard/cross-org/owner-sees-and-clears-a-foreign-record", func(t *testing.T, e *tenants) {
			if err := e.f.db.SetMaintenance(t.Context(), store.Maintenance{Hostname: e.shop, OrgID: e.b, By: "key:old"}); err != nil {
				t.Fatal(err)
			}
			if ms := e.maintenanceOf(t, e.viewerA); ms[e.shop] != e.b {
				t.Errorf("a's listing = %v, want b's record on %s", ms, e.shop)
			}
			e.f.expectError(t, "DELETE", "/maintenance/x.b.test", e.opA, "", http.StatusNotFound, "not in maintenance")
			e.f.expect(t, "DELETE", "/maintenance/"+e.shop, e.opA, "", http.StatusNoContent, nil)
			if ms := e.maintenanceOf(t, masterToken); len(ms) != 0 {
				t.Errorf("maintenance after the owner cleared it = %v, want none", ms)
			}
		}},
		{"guard/cross-org/owner-takes-over-a-foreign-record", func(t *testing.T, e *tenants) {
			if err := e.f.db.SetMaintenance(t.Context(), store.Maintenance{Hostname: e.shop, OrgID: e.b, By: "key:old"}); err != nil {
				t.Fatal(err)
			}
			e.f.expect(t, "PUT", "/maintenance/"+e.shop, e.opA, "", http.StatusNoContent, nil)
			if ms := e.maintenanceOf(t, masterToken); ms[e.shop] != e.a {
				t.Errorf("maintenance = %v, want %s held by a", ms, e.shop)
			}
			e.f.expectError(t, "DELETE", "/maintenance/"+e.shop, e.opB, "", http.StatusNotFound, "not in maintenance")
		}},

		// Hijack by minting a token for another organization's hostname.
		{"guard/cross-org/admin-of-b-mints-a-hostname", func(t *testing.T, e *tenants) {
			for _, h := range []string{e.shop, "login.a.test", "*.a.test", "*.x.a.test", "*.test"} {
				e.f.expectError(t, "POST", "/tokens", e.adminB, tokenBody(t, "ok.b.test", h), http.StatusForbidden, "not among the hostnames organization "+e.b+" owns")
			}
			var toks []admin.Token
			e.f.expect(t, "GET", "/tokens", e.adminB, "", http.StatusOK, &toks)
			if len(toks) != 1 || toks[0].ID != e.legacyBID {
				t.Errorf("b's tokens after the refusals = %+v, want only the legacy one", toks)
			}
		}},
		{"guard/cross-org/default-org-mints-inside-a", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "POST", "/tokens", masterToken, tokenBody(t, e.shop), http.StatusForbidden, "not among the hostnames")
			e.f.expectError(t, "POST", "/tokens", masterToken, tokenBody(t, "*.test"), http.StatusForbidden, "not among the hostnames")
			e.f.expect(t, "POST", "/tokens", masterToken, tokenBody(t, "free.test"), http.StatusCreated, nil)
		}},
		{"guard/cross-org/org-without-patterns-mints-nothing", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "POST", "/tokens", e.adminC, tokenBody(t, "free.test"), http.StatusForbidden, "owns no hostnames")
			e.f.expectError(t, "PUT", "/maintenance/free.test", e.adminC, "", http.StatusForbidden, "owns no hostnames")
		}},
		{"guard/cross-org/wildcard-no-wider-than-a-pattern", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "POST", "/tokens", e.adminA, tokenBody(t, "*.test"), http.StatusForbidden, "not among the hostnames")
			e.f.expect(t, "POST", "/tokens", e.adminA, tokenBody(t, "*.a.test", "*.x.a.test", e.shop), http.StatusCreated, nil)
		}},
		{"guard/cross-org/ownership-overlap-409", func(t *testing.T, e *tenants) {
			for _, p := range []string{e.shop, "x.a.test", "*.a.test", "*.test", "*.y.a.test"} {
				e.f.expectError(t, "PUT", "/orgs/"+e.b+"/hostnames", masterToken, jsonOf(t, admin.SetOrgHostnamesRequest{Patterns: []string{p}}),
					http.StatusConflict, "owned by organization "+e.a)
			}
			var got admin.OrgHostnames
			e.f.expect(t, "GET", "/orgs/"+e.b+"/hostnames", masterToken, "", http.StatusOK, &got)
			if strings.Join(got.Patterns, ",") != "*.b.test" {
				t.Errorf("b's patterns after the refusals = %v, want *.b.test", got.Patterns)
			}
		}},
		{"guard/cross-org/owner-sees-an-intruding-client", func(t *testing.T, e *tenants) {
			e.f.clients.set(admin.ClientInfo{ID: "evil", OrgID: e.b, Hostnames: []string{e.shop}, Path: "/login"},
				admin.ClientInfo{ID: "b-own", OrgID: e.b, Hostnames: []string{"x.b.test"}})
			var cs []admin.ClientInfo
			e.f.expect(t, "GET", "/clients", e.viewerA, "", http.StatusOK, &cs)
			if len(cs) != 1 || cs[0].ID != "evil" {
				t.Errorf("a's clients = %+v, want the intruder on its hostname only", cs)
			}
		}},
		{"guard/cross-org/owner-sees-and-disarms-a-foreign-scaling-record", func(t *testing.T, e *tenants) {
			e.f.scaling.set(scalingView("scl_evil", e.b, e.shop, 0), scalingView("scl_b", e.b, "x.b.test", 1))
			_, ids := e.f.listScaling(t, e.viewerA)
			if strings.Join(ids, ",") != "scl_evil" {
				t.Errorf("a's scaling records = %v, want scl_evil", ids)
			}
			e.f.expect(t, "DELETE", "/scaling/scl_evil", e.opA, "", http.StatusNoContent, nil)
			e.f.expectError(t, "DELETE", "/scaling/scl_b", e.opA, "", http.StatusNotFound, "not found")
		}},

		// The handshake: a client whose organization does not own what it
		// announces is refused with the reason and audited.
		{"guard/cross-org/client-of-b-announcing-a-hostname", func(t *testing.T, e *tenants) {
			g := startGateway(t, e)
			reason := g.refused(t, e.legacyB, tunnel.Service{ID: "0", Hostnames: []string{e.shop}, Healthy: true})
			if !strings.Contains(reason, "not among the hostnames of this client's organization") {
				t.Errorf("refusal = %q, want the ownership reason", reason)
			}
			wantRefusalAudited(t, e, e.b, "token:"+e.legacyBID)
		}},
		{"guard/cross-org/path-bind-inside-a-hostname", func(t *testing.T, e *tenants) {
			g := startGateway(t, e)
			g.serve(t, e, e.shop)
			g.refused(t, e.legacyB, tunnel.Service{ID: "0", Hostnames: []string{e.shop}, Path: "/login", Healthy: true})
			if status, body := g.visit(t, e.shop, "/login"); status != http.StatusOK || body != "victim" {
				t.Errorf("GET %s/login = %d %q, want the victim's answer", e.shop, status, body)
			}
			wantRefusalAudited(t, e, e.b, "token:"+e.legacyBID)
		}},
		{"guard/cross-org/default-org-client-on-an-owned-hostname", func(t *testing.T, e *tenants) {
			g := startGateway(t, e)
			reason := g.refused(t, masterToken, tunnel.Service{ID: "0", Hostnames: []string{"x.a.test"}, Healthy: true})
			if !strings.Contains(reason, "owned by another organization") {
				t.Errorf("refusal = %q, want the ownership reason", reason)
			}
		}},

		{"guard/cross-org/refusal-reason-bounded", func(t *testing.T, e *tenants) {
			hosts := make([]string, 200)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("h%d.a.test", i)
			}
			secret := "apr_manyhosts00000000000000000000000000000000000000000"
			sum := sha256.Sum256([]byte(secret))
			if _, err := e.f.db.CreateToken(t.Context(), store.Token{OrgID: e.b, Name: "many", Prefix: secret[:8], Hash: sum[:], Hostnames: hosts}); err != nil {
				t.Fatal(err)
			}
			g := startGateway(t, e)
			reason := g.refused(t, secret, tunnel.Service{ID: "0", Hostnames: hosts, Healthy: true})
			if len(reason) > 600 || !strings.Contains(reason, "and 195 more") {
				t.Errorf("refusal of 200 hostnames = %d bytes %q, want at most 600 counting the rest", len(reason), reason)
			}
		}},
		{"guard/cross-org/ownership-change-drops-a-live-bind", func(t *testing.T, e *tenants) {
			g := startGateway(t, e)
			up, down := g.runClient(t, masterToken, victim{}, tunnel.Service{ID: "0", Hostnames: []string{"late.test"}, Healthy: true})
			g.waitUp(t, up, down)
			if status, body := g.visit(t, "late.test", "/"); status != http.StatusOK || body != "victim" {
				t.Fatalf("GET late.test before the change = %d %q, want the default organization's client", status, body)
			}
			// The master gives late.test to a: the server learns it from
			// the store's change feed and drops the default org's bind.
			e.f.own(t, e.a, e.shop, "*.a.test", "late.test")
			deadline := time.Now().Add(handshakeWait)
			poll := time.NewTicker(10 * time.Millisecond)
			defer poll.Stop()
			for {
				// Without its bind the hostname has no client: 502, or 504
				// once the wait for one (gateway_timeout) runs out.
				status, body := g.visit(t, "late.test", "/")
				if status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("GET late.test = %d %q %v after the ownership change, want 502 or 504", status, body, handshakeWait)
				}
				<-poll.C
			}
		}},

		// Oversize lists, their deduplication and their audit, and
		// ambiguous JSON.
		{"guard/oversize/token-hostnames-capped", func(t *testing.T, e *tenants) {
			hosts := make([]string, 101)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("h%d.a.test", i)
			}
			e.f.expectError(t, "POST", "/tokens", e.adminA, tokenBody(t, hosts...), http.StatusBadRequest, "hostnames: 101 entries, at most 100")
		}},
		{"guard/oversize/megabyte-of-hostnames-refused-by-size", func(t *testing.T, e *tenants) {
			// The probe's 1 MiB body took 13 s of quadratic deduplication;
			// the cap refuses it before any per-entry work.
			hosts := make([]string, 110000)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("%x.t", i)
			}
			body := tokenBody(t, hosts...)
			if len(body) < 1<<20-200000 {
				t.Fatalf("body is %d bytes, want about 1 MiB", len(body))
			}
			e.f.expectError(t, "POST", "/tokens", e.adminA, body, http.StatusBadRequest, "at most 100")
		}},
		{"guard/oversize/allowed-ips-capped-and-deduplicated", func(t *testing.T, e *tenants) {
			ips := make([]string, 101)
			for i := range ips {
				ips[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
			}
			body := jsonOf(t, admin.CreateTokenRequest{Name: "t", Hostnames: []string{e.shop}, AllowedIPs: ips})
			e.f.expectError(t, "POST", "/tokens", e.adminA, body, http.StatusBadRequest, "allowed_ips: 101 entries, at most 100")
			var tok admin.MintedToken
			body = jsonOf(t, admin.CreateTokenRequest{Name: "t", Hostnames: []string{e.shop, "SHOP.a.test"}, AllowedIPs: []string{"10.0.0.1", "10.0.0.1/32"}})
			e.f.expect(t, "POST", "/tokens", e.adminA, body, http.StatusCreated, &tok)
			if len(tok.Hostnames) != 1 || len(tok.AllowedIPs) != 1 {
				t.Errorf("token = %v %v, want duplicates dropped", tok.Hostnames, tok.AllowedIPs)
			}
		}},
		{"guard/oversize/audit-detail-truncated", func(t *testing.T, e *tenants) {
			hosts := make([]string, 100)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("host-with-a-long-name-%03d.a.test", i)
			}
			e.f.expect(t, "POST", "/tokens", e.adminA, tokenBody(t, hosts...), http.StatusCreated, nil)
			es := e.f.audit(t)
			if es[0].Event != admin.EventTokenCreated || len(es[0].Detail) > 600 || !strings.Contains(es[0].Detail, "(100 in all)") {
				t.Errorf("audit detail of a 100-hostname token = %d bytes %q, want at most 600 with the count", len(es[0].Detail), es[0].Detail)
			}
		}},
		{"guard/oversize/org-hostnames-capped", func(t *testing.T, e *tenants) {
			ps := make([]string, store.MaxOrgHostnames+1)
			for i := range ps {
				ps[i] = fmt.Sprintf("p%d.b.test", i)
			}
			e.f.expectError(t, "PUT", "/orgs/"+e.b+"/hostnames", masterToken, jsonOf(t, admin.SetOrgHostnamesRequest{Patterns: ps}), http.StatusBadRequest, "at most 1000")
		}},
		{"guard/ambiguity/duplicate-json-keys-refused", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "POST", "/orgs", masterToken, `{"name":"dupa","name":"dupb"}`, http.StatusBadRequest, `duplicate field "name"`)
			e.f.expectError(t, "POST", "/tokens", e.adminA, `{"name":"t","hostnames":["x.a.test"],"hostnames":["y.b.test"]}`, http.StatusBadRequest, `duplicate field "hostnames"`)
			e.f.expectError(t, "PUT", "/orgs/"+e.b+"/hostnames", masterToken, `{"patterns":["x.b.test"],"patterns":[]}`, http.StatusBadRequest, `duplicate field "patterns"`)
			var orgs []admin.Org
			e.f.expect(t, "GET", "/orgs", masterToken, "", http.StatusOK, &orgs)
			for _, o := range orgs {
				if strings.HasPrefix(o.Name, "dup") {
					t.Errorf("organization %q created from a body with duplicate keys", o.Name)
				}
			}
		}},

		// Wildcard maintenance is org-scoped like an exact one: a wildcard
		// another organization owns, or one wider than the caller's, is
		// refused; the owner's own is taken.
		{"guard/cross-org/wildcard-maintenance", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "PUT", "/maintenance/*.b.test", e.opA, "", http.StatusForbidden, "not among the hostnames")
			e.f.expectError(t, "PUT", "/maintenance/%2A.test", e.opA, "", http.StatusForbidden, "not among the hostnames")
			e.f.expectError(t, "PUT", "/maintenance/*.b.test", masterToken, `{"org_id":"`+e.a+`"}`, http.StatusForbidden, "not among the hostnames")
			e.f.expect(t, "PUT", "/maintenance/%2A.a.test", e.opA, `{"reason":"upgrade","ttl_seconds":60}`, http.StatusNoContent, nil)
			e.f.expectError(t, "DELETE", "/maintenance/*.a.test", e.opB, "", http.StatusNotFound, "not in maintenance")
			if ms := e.maintenanceOf(t, masterToken); len(ms) != 1 || ms["*.a.test"] != e.a {
				t.Errorf("maintenance = %v, want *.a.test of a alone", ms)
			}
		}},
		// The body's fields are bounded.
		{"bounds/maintenance-body", func(t *testing.T, e *tenants) {
			e.f.expectError(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"reason":"`+strings.Repeat("r", 501)+`"}`, http.StatusBadRequest, "reason: 501 bytes, at most 500")
			e.f.expectError(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"reason":"line\nbreak"}`, http.StatusBadRequest, "printable UTF-8 text on one line")
			e.f.expectError(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"ttl_seconds":2592001}`, http.StatusBadRequest, "ttl_seconds: 2592001 is not from 0 to 2592000")
			e.f.expectError(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"ttl_seconds":-1}`, http.StatusBadRequest, "ttl_seconds: -1")
			e.f.expectError(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"ttl_seconds":1e30}`, http.StatusBadRequest, "")
			if ms := e.maintenanceOf(t, masterToken); len(ms) != 0 {
				t.Errorf("maintenance after refused bodies = %v, want none", ms)
			}
			e.f.expect(t, "PUT", "/maintenance/shop.a.test", e.opA, `{"reason":"`+strings.Repeat("r", 500)+`","ttl_seconds":2592000}`, http.StatusNoContent, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newTenants(t))
		})
	}
}

// wantRefusalAudited fails t unless org's audit log holds a client_refused
// entry by actor.
func wantRefusalAudited(t *testing.T, e *tenants, org, actor string) {
	t.Helper()
	es, err := e.f.db.ListAudit(t.Context(), org, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range es {
		if a.Event == "client_refused" && a.Actor.String() == actor {
			return
		}
	}
	t.Errorf("audit of %s = %+v, want client_refused by %s", org, es, actor)
}

// hostileGateway is a whole server on the fixture's store, serving real
// TCP on 127.0.0.1:0.
type hostileGateway struct {
	url string
}

// handshakeWait bounds a tunnel's handshake and the first request through
// it.
const handshakeWait = 15 * time.Second

func startGateway(t *testing.T, e *tenants) *hostileGateway {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Token, cfg.Host, cfg.Port, cfg.Store.DataDir = masterToken, "127.0.0.1", 0, t.TempDir()
	cfg.Router.GatewayTimeout = 200 * time.Millisecond // a hostname without a client answers quickly
	cfg.Router.IPLimitMax = 0                          // polls from one address must not run into the per-visitor limit
	gw, err := server.New(t.Context(), cfg, server.Options{Store: e.f.db})
	if err != nil {
		t.Fatalf("gateway.New() = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	})
	return &hostileGateway{url: "http://" + ln.Addr().String()}
}

// runClient holds a tunnel with token announcing services until the test
// ends; connected and refused report its first session's outcome.
func (g *hostileGateway) runClient(t *testing.T, token string, fwd tunnel.Forwarder, services ...tunnel.Service) (connected <-chan struct{}, refused <-chan error) {
	t.Helper()
	up := make(chan struct{}, 1)
	down := make(chan error, 1)
	c, err := tunnel.NewClient(tunnel.ClientConfig{
		URL:   g.url,
		Token: token,
		Announce: func() tunnel.Announcement {
			return tunnel.Announcement{Name: "c", InstanceID: token[:8], Services: services}
		},
		Forwarder:    fwd,
		OnConnect:    func(string) { signal(up, struct{}{}) },
		OnDisconnect: func(err error) { signal(down, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("client Run() = %v", err)
		}
	})
	return up, down
}

// signal sends v unless the channel already holds one: only the first
// outcome counts.
func signal[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// refused runs a client that must be refused at the handshake, and returns
// the server's reason.
func (g *hostileGateway) refused(t *testing.T, token string, services ...tunnel.Service) string {
	t.Helper()
	up, down := g.runClient(t, token, victim{}, services...)
	timer := time.NewTimer(handshakeWait)
	defer timer.Stop()
	select {
	case <-up:
		t.Fatalf("client announcing %+v was accepted, want refused", services)
	case err := <-down:
		var re *tunnel.RefusedError
		if !errors.As(err, &re) {
			t.Fatalf("client ended with %v, want a refusal", err)
		}
		return re.Reason
	case <-timer.C:
		t.Fatalf("no handshake outcome within %v", handshakeWait)
	}
	return ""
}

// serve connects a client of organization a serving host with victim.
func (g *hostileGateway) serve(t *testing.T, e *tenants, host string) {
	t.Helper()
	var tok admin.MintedToken
	e.f.expect(t, "POST", "/tokens", e.adminA, tokenBody(t, host), http.StatusCreated, &tok)
	up, down := g.runClient(t, tok.Secret, victim{}, tunnel.Service{ID: "0", Hostnames: []string{host}, Healthy: true})
	g.waitUp(t, up, down)
}

// waitUp waits for a client's first session to be accepted.
func (g *hostileGateway) waitUp(t *testing.T, up <-chan struct{}, down <-chan error) {
	t.Helper()
	timer := time.NewTimer(handshakeWait)
	defer timer.Stop()
	select {
	case <-up:
	case err := <-down:
		t.Fatalf("client ended with %v, want connected", err)
	case <-timer.C:
		t.Fatalf("client not connected within %v", handshakeWait)
	}
}

// visit sends a visitor's GET for host and path and returns the answer.
func (g *hostileGateway) visit(t *testing.T, host, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), handshakeWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", g.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s%s: %v", host, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// victim is organization a's backend: it answers every request "victim".
type victim struct{}

func (victim) Forward(_ context.Context, _ string, req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    http.StatusOK,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		ContentLength: int64(len("victim")),
		Body:          io.NopCloser(strings.NewReader("victim")),
		Request:       req,
	}, nil
}
