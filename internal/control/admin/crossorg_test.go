package admin_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/portspec"
	"github.com/aperio-dev/aperio/internal/telemetry"
	"github.com/aperio-dev/aperio/internal/testkit/oidctest"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
)

// orgWorld is two organizations side by side, each owning its hostnames
// and holding one of every record, and an admin key of every role in
// organization a: the callers of the cross-org matrix.
type orgWorld struct {
	f    *fixture
	in   *inspect.Inspector
	a, b string
	keys map[string]string // role ("viewer", "operator", "admin", "master") → credential; keys are a's
	// sessions are login sessions of users admin_oidc_roles maps to a,
	// by role.
	sessions map[string]*browserSession
	// keySessions are key sessions (POST /aperio/admin/session) of
	// keys, by role, and of the master token.
	keySessions map[string]*keySession
	seq         atomic.Int64
	// One record of b's of each kind, which no key of a may see.
	bRecords []string
}

func newOrgWorld(t *testing.T) *orgWorld {
	t.Helper()
	base := newFixture(t)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	op, p := newProvider(t)
	var roles []admin.OIDCRole
	for _, r := range admin.Roles() {
		roles = append(roles, admin.OIDCRole{Email: r + "@a.test", Org: "a", Role: r})
	}
	in := newTestInspector(t)
	traffic := &fakeTraffic{hosts: []string{"a.test", "traffic.b.test", "__other"}, held: 1}
	ports := &fakePorts{}
	f := base.withOIDC(t, p, roles, nil, admin.Config{Ports: ports, TCPPortRange: []portspec.Range{{Lo: 20000, Hi: 29999}}, Clients: base.clients, Disabler: base.clients, Drainer: base.clients, Scaling: base.scaling, Explainer: rt, Shares: fakeShares{},
		Traffic: traffic, Stream: newHub(t, telemetry.HubConfig{}), Inspector: in, Replay: fakePipeline(in), Webhooks: &fakeSender{db: base.db}})
	f.clients, f.scaling = base.clients, base.scaling
	w := &orgWorld{f: f, in: in, keys: map[string]string{"master": masterToken}, sessions: map[string]*browserSession{}, keySessions: map[string]*keySession{}}
	w.a, w.b = f.org(t, "a"), f.org(t, "b")
	for _, r := range admin.Roles() {
		s := f.login(t, op, oidctest.User(r+"@a.test", true))
		if s.status != http.StatusOK || s.who.OrgID != w.a || s.who.Role != r {
			t.Fatalf("login of the %s user = %d %+v, want %s in a", r, s.status, s.who, r)
		}
		w.sessions[r] = s
	}
	f.own(t, w.a, "a.test", "*.a.test")
	f.own(t, w.b, "b.test", "*.b.test")
	f.expect(t, "PUT", "/orgs/"+w.a+"/ports", masterToken, `{"ports":["20000-20099"]}`, http.StatusOK, nil)
	f.expect(t, "PUT", "/orgs/"+w.b+"/ports", masterToken, `{"ports":["21000-21099"]}`, http.StatusOK, nil)
	for _, r := range admin.Roles() {
		w.keys[r] = f.key(t, w.a, r).Secret
	}
	for who, cred := range w.keys {
		w.keySessions[who] = f.keyLogin(t, cred)
	}
	f.clients.set(
		admin.ClientInfo{ID: "cli_a", OrgID: w.a, Hostnames: []string{"a.test"}},
		admin.ClientInfo{ID: "cli_b", OrgID: w.b, Hostnames: []string{"b.test"}},
	)
	ports.list = []admin.PortInfo{{Port: 2222, Protocol: "tcp", OrgID: w.a, Names: []string{"ssh-of-a"}}, {Port: 2223, Protocol: "udp", OrgID: w.b, Names: []string{"dns-of-b"}}}
	bToken := w.newToken(t, w.b)
	w.bRecords = []string{
		w.newKey(t, w.b), bToken, w.newWebhook(t, w.b), w.newScaling(t, w.b), w.newDelivery(t, w.b).delivery,
		w.newMaintenance(t, w.b), "cli_b", w.inspected(t, false), "traffic.b.test", "__other", "usage.b.test", "dns-of-b",
	}
	today := f.clock.Now() // the API's "today"

	if err := f.db.AddUsage(t.Context(), []store.UsageDelta{
		{Day: today, TokenID: w.newToken(t, w.a), OrgID: w.a, Hostname: "usage.a.test", Bytes: 10, Requests: 1},
		{Day: today, TokenID: bToken, OrgID: w.b, Hostname: "usage.b.test", Bytes: 20, Requests: 2},
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// org returns a's ID for own, b's otherwise.
func (w *orgWorld) org(own bool) string {
	if own {
		return w.a
	}
	return w.b
}

// ports returns a port range of a's for own, of b's otherwise.
func (w *orgWorld) ports(own bool) string {
	if own {
		return "20000-20099"
	}
	return "21000-21099"
}

// suffix returns the hostname space of a for own, b's otherwise.
func (w *orgWorld) suffix(own bool) string {
	if own {
		return "a.test"
	}
	return "b.test"
}

func (w *orgWorld) next() int64 { return w.seq.Add(1) }

func (w *orgWorld) newKey(t *testing.T, org string) string {
	var k admin.MintedKey
	w.f.expect(t, "POST", "/admin-keys", masterToken, fmt.Sprintf(`{"name":"k%d","role":"viewer","org_id":%q}`, w.next(), org), http.StatusCreated, &k)
	return k.ID
}

func (w *orgWorld) newToken(t *testing.T, org string) string {
	var tok admin.MintedToken
	host := fmt.Sprintf("t%d.%s", w.next(), map[bool]string{true: "a.test", false: "b.test"}[org == w.a])
	w.f.expect(t, "POST", "/tokens", masterToken, fmt.Sprintf(`{"name":"t","hostnames":[%q],"org_id":%q}`, host, org), http.StatusCreated, &tok)
	return tok.ID
}

func (w *orgWorld) newWebhook(t *testing.T, org string) string {
	var wh admin.Webhook
	w.f.expect(t, "POST", "/webhooks", masterToken, fmt.Sprintf(`{"url":"https://hooks.example.com/%d","events":["scaling_failed"],"org_id":%q}`, w.next(), org), http.StatusCreated, &wh)
	return wh.ID
}

// loggedDelivery names a delivery in a webhook's log.
type loggedDelivery struct{ webhook, delivery string }

// newDelivery creates a webhook in org with one logged delivery.
func (w *orgWorld) newDelivery(t *testing.T, org string) loggedDelivery {
	t.Helper()
	d := loggedDelivery{webhook: w.newWebhook(t, org), delivery: fmt.Sprintf("dlv_%d", w.next())}
	if _, err := w.f.db.RecordWebhookDelivery(t.Context(), store.WebhookDelivery{ID: d.delivery, WebhookID: d.webhook, OrgID: org,
		Event: "scaling_failed", Status: store.DeliveryFailed, Attempts: 5, Body: []byte(`{}`)}, 0); err != nil {
		t.Fatalf("RecordWebhookDelivery: %v", err)
	}
	return d
}

func (w *orgWorld) newScaling(t *testing.T, org string) string {
	id := fmt.Sprintf("scl_%d", w.next())
	w.f.scaling.mu.Lock()
	w.f.scaling.views = append(w.f.scaling.views, scalingView(id, org, "s."+w.suffix(org == w.a), 0))
	w.f.scaling.mu.Unlock()
	return id
}

// newMaintenance puts a fresh hostname of org in maintenance and returns it.
func (w *orgWorld) newMaintenance(t *testing.T, org string) string {
	host := fmt.Sprintf("m%d.%s", w.next(), w.suffix(org == w.a))
	w.f.expect(t, "PUT", "/maintenance/"+host, masterToken, fmt.Sprintf(`{"org_id":%q}`, org), http.StatusNoContent, nil)
	return host
}

// inspected returns a's hostname under capture for own, b's otherwise,
// starting its capture with one request recorded if need be.
func (w *orgWorld) inspected(t *testing.T, own bool) string {
	host := "i." + w.suffix(own)
	if w.in.Lookup(host) == nil {
		w.f.expect(t, "PUT", "/inspect/"+host, masterToken, "", http.StatusOK, nil)
		recordOne(t, w.in, host, "body")
	}
	return host
}

// inspectedEntry returns the path of a captured request of a's hostname
// for own, b's otherwise.
func (w *orgWorld) inspectedEntry(t *testing.T, own bool) string {
	host := w.inspected(t, own)
	return "/inspect/" + host + "/requests/" + w.in.Capture(host).Requests()[0].ID
}

// matrixCase is one route of the matrix: req builds the request a caller
// makes at organization a's records (own) or b's, creating what it names.
type matrixCase struct {
	method, pattern string
	req             func(t *testing.T, w *orgWorld, master, own bool) (path, body string)
	// key is the status for a key with enough role at its own
	// organization's records and at the other's; master is the master
	// token's (at either).
	own, other, master int
	// listing routes answer 200 either way: none of b's records may
	// appear in a key's answer.
	listing bool
}

func fixed(path string) func(*testing.T, *orgWorld, bool, bool) (string, string) {
	return func(*testing.T, *orgWorld, bool, bool) (string, string) { return path, "" }
}

// orgField returns `,"org_id":"…"` naming the target organization for the
// master token (or for a key aiming at b, which must be refused), and
// nothing for a key at its own.
func orgField(w *orgWorld, master, own bool) string {
	if !master && own {
		return ""
	}
	return fmt.Sprintf(`,"org_id":%q`, w.org(own))
}

var matrix = []matrixCase{
	{method: "GET", pattern: "/orgs", req: fixed("/orgs"), own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/orgs", req: func(_ *testing.T, w *orgWorld, _, _ bool) (string, string) {
		return "/orgs", fmt.Sprintf(`{"name":"o%d"}`, w.next())
	}, master: 201},
	{method: "GET", pattern: "/orgs/{id}/hostnames", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/orgs/" + w.org(own) + "/hostnames", ""
	}, own: 200, other: 404, master: 200},
	{method: "PUT", pattern: "/orgs/{id}/hostnames", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		s := w.suffix(own)
		return "/orgs/" + w.org(own) + "/hostnames", fmt.Sprintf(`{"patterns":[%q,"*.%s"]}`, s, s)
	}, master: 200},
	{method: "GET", pattern: "/orgs/{id}/ports", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/orgs/" + w.org(own) + "/ports", ""
	}, own: 200, other: 404, master: 200},
	{method: "PUT", pattern: "/orgs/{id}/ports", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/orgs/" + w.org(own) + "/ports", fmt.Sprintf(`{"ports":[%q]}`, w.ports(own))
	}, master: 200},
	// Port ownership: a key may name its organization's ports in a
	// token, and never b's (403, like b's hostnames).
	{method: "POST", pattern: "/tokens", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		field := ""
		if master {
			field = fmt.Sprintf(`,"org_id":%q`, w.org(own))
		}
		return "/tokens", fmt.Sprintf(`{"name":"ports","allow_tcp_ports":[%q]%s}`, w.ports(own), field)
	}, own: 201, other: 403, master: 201},
	{method: "PATCH", pattern: "/tokens/{id}", req: func(t *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key edits its own token to name b's ports; the master token
		// edits each organization's token with that organization's.
		return "/tokens/" + w.newToken(t, w.org(own || !master)), fmt.Sprintf(`{"allow_tcp_ports":[%q]}`, w.ports(own))
	}, own: 200, other: 403, master: 200},
	{method: "GET", pattern: "/admin-keys", req: fixed("/admin-keys"), own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/admin-keys", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		return "/admin-keys", fmt.Sprintf(`{"name":"k%d","role":"viewer"%s}`, w.next(), orgField(w, master, own))
	}, own: 201, other: 400, master: 201},
	{method: "DELETE", pattern: "/admin-keys/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/admin-keys/" + w.newKey(t, w.org(own)), ""
	}, own: 204, other: 404, master: 204},
	{method: "GET", pattern: "/tokens", req: fixed("/tokens"), own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/tokens", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key aiming at b names b's hostname in its own organization.
		field := ""
		if master {
			field = fmt.Sprintf(`,"org_id":%q`, w.org(own))
		}
		return "/tokens", fmt.Sprintf(`{"name":"t","hostnames":["x%d.%s"]%s}`, w.next(), w.suffix(own), field)
	}, own: 201, other: 403, master: 201},
	{method: "DELETE", pattern: "/tokens/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/tokens/" + w.newToken(t, w.org(own)), ""
	}, own: 200, other: 404, master: 200},
	{method: "PATCH", pattern: "/tokens/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/tokens/" + w.newToken(t, w.org(own)), `{"name":"renamed","max_rps":5,"paths":["/api"]}`
	}, own: 200, other: 404, master: 200},
	{method: "POST", pattern: "/tokens/{id}/rotate", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/tokens/" + w.newToken(t, w.org(own)) + "/rotate", `{"grace":"1h"}`
	}, own: 200, other: 404, master: 200},
	{method: "PATCH", pattern: "/orgs/{id}", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/orgs/" + w.org(own), `{"max_clients":50}`
	}, master: 200},
	{method: "GET", pattern: "/clients", req: fixed("/clients"), own: 200, other: 200, master: 200, listing: true},
	{method: "GET", pattern: "/ports", req: fixed("/ports"), own: 200, other: 200, master: 200, listing: true},
	{method: "GET", pattern: "/ports/explain", req: func(_ *testing.T, _ *orgWorld, _, own bool) (string, string) {
		return map[bool]string{true: "/ports/explain?port=2222&protocol=tcp", false: "/ports/explain?port=2223&protocol=udp"}[own], ""
	}, own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/clients/{id}/disable", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/clients/" + map[bool]string{true: "cli_a", false: "cli_b"}[own] + "/disable", ""
	}, own: 204, other: 404, master: 204},
	{method: "POST", pattern: "/clients/{id}/enable", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/clients/" + map[bool]string{true: "cli_a", false: "cli_b"}[own] + "/enable", ""
	}, own: 204, other: 404, master: 204},
	{method: "POST", pattern: "/clients/{id}/drain", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/clients/" + map[bool]string{true: "cli_a", false: "cli_b"}[own] + "/drain", ""
	}, own: 204, other: 404, master: 204},
	{method: "GET", pattern: "/scaling", req: fixed("/scaling"), own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/scaling", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key aiming at b names b's hostname in its own organization.
		field := ""
		if master {
			field = fmt.Sprintf(`,"org_id":%q`, w.org(own))
		}
		return "/scaling", fmt.Sprintf(`{"hostname":"c%d.%s","url":"https://provider.example.com/scale"%s}`, w.next(), w.suffix(own), field)
	}, own: 201, other: 403, master: 201},
	{method: "GET", pattern: "/scaling/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/scaling/" + w.newScaling(t, w.org(own)), ""
	}, own: 200, other: 404, master: 200},
	{method: "DELETE", pattern: "/scaling/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/scaling/" + w.newScaling(t, w.org(own)), ""
	}, own: 204, other: 404, master: 204},
	{method: "GET", pattern: "/webhooks", req: fixed("/webhooks"), own: 200, other: 200, master: 200, listing: true},
	{method: "POST", pattern: "/webhooks", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		return "/webhooks", fmt.Sprintf(`{"url":"https://hooks.example.com/%d","events":["scaling_failed"]%s}`, w.next(), orgField(w, master, own))
	}, own: 201, other: 400, master: 201},
	{method: "DELETE", pattern: "/webhooks/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/webhooks/" + w.newWebhook(t, w.org(own)), ""
	}, own: 204, other: 404, master: 204},
	{method: "GET", pattern: "/webhooks/{id}/deliveries", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/webhooks/" + w.newDelivery(t, w.org(own)).webhook + "/deliveries", ""
	}, own: 200, other: 404, master: 200, listing: true},
	{method: "POST", pattern: "/webhooks/{id}/test", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/webhooks/" + w.newWebhook(t, w.org(own)) + "/test", ""
	}, own: 200, other: 404, master: 200},
	{method: "POST", pattern: "/webhooks/{id}/deliveries/{delivery_id}/redeliver", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		d := w.newDelivery(t, w.org(own))
		return "/webhooks/" + d.webhook + "/deliveries/" + d.delivery + "/redeliver", ""
	}, own: 200, other: 404, master: 200},
	{method: "GET", pattern: "/maintenance", req: fixed("/maintenance"), own: 200, other: 200, master: 200, listing: true},
	{method: "PUT", pattern: "/maintenance/{hostname}", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key aiming at b names b's hostname in its own organization.
		body := ""
		if master {
			body = fmt.Sprintf(`{"org_id":%q}`, w.org(own))
		}
		return fmt.Sprintf("/maintenance/p%d.%s", w.next(), w.suffix(own)), body
	}, own: 204, other: 403, master: 204},
	{method: "DELETE", pattern: "/maintenance/{hostname}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/maintenance/" + w.newMaintenance(t, w.org(own)), ""
	}, own: 204, other: 404, master: 204},
	{method: "POST", pattern: "/oidc/sessions/revoke", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key aiming at b names b's hostname in its own organization.
		field := ""
		if master {
			field = fmt.Sprintf(`,"org_id":%q`, w.org(own))
		}
		return "/oidc/sessions/revoke", fmt.Sprintf(`{"hostname":"o%d.%s","email":"jane@example.com"%s}`, w.next(), w.suffix(own), field)
	}, own: 200, other: 403, master: 200},
	{method: "POST", pattern: "/share", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		// A key aiming at b names b's hostname in its own organization.
		field := ""
		if master {
			field = fmt.Sprintf(`,"org_id":%q`, w.org(own))
		}
		return "/share", fmt.Sprintf(`{"hostname":"s%d.%s","ttl":"1h"%s}`, w.next(), w.suffix(own), field)
	}, own: 201, other: 403, master: 201},
	{method: "POST", pattern: "/share/keys/rotate", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		return "/share/keys/rotate", fmt.Sprintf(`{"revoke_previous":true%s}`, orgField(w, master, own))
	}, own: 200, other: 400, master: 200},
	{method: "GET", pattern: "/inspect", req: fixed("/inspect"), own: 200, other: 200, master: 200, listing: true},
	{method: "PUT", pattern: "/inspect/{hostname}", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/inspect/p." + w.suffix(own), `{"max_requests":5}`
	}, own: 200, other: 403, master: 200},
	{method: "DELETE", pattern: "/inspect/{hostname}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		host := fmt.Sprintf("d%d.%s", w.next(), w.suffix(own))
		w.f.expect(t, "PUT", "/inspect/"+host, masterToken, `{"max_requests":1,"body_bytes":1}`, http.StatusOK, nil)
		return "/inspect/" + host, ""
	}, own: 204, other: 403, master: 204},
	{method: "GET", pattern: "/inspect/{hostname}/requests", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/inspect/" + w.inspected(t, own) + "/requests", ""
	}, own: 200, other: 403, master: 200},
	{method: "GET", pattern: "/inspect/{hostname}/requests/{id}", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return w.inspectedEntry(t, own), ""
	}, own: 200, other: 403, master: 200},
	{method: "POST", pattern: "/inspect/{hostname}/requests/{id}/replay", req: func(t *testing.T, w *orgWorld, _, own bool) (string, string) {
		return w.inspectedEntry(t, own) + "/replay", ""
	}, own: 200, other: 403, master: 200},
	{method: "GET", pattern: "/audit", req: fixed("/audit"), own: 200, other: 200, master: 200, listing: true},
	{method: "GET", pattern: "/audit/verify", req: fixed("/audit/verify"), own: 200, other: 200, master: 200},
	// A key names its own organization or none; naming b is refused,
	// and without org it sees a's rows only (the listing check: b's
	// token and organization have rows too).
	{method: "GET", pattern: "/usage", req: func(_ *testing.T, w *orgWorld, master, own bool) (string, string) {
		if !master && own {
			return "/usage", ""
		}
		return "/usage?" + url.Values{"org": {w.org(own)}}.Encode(), ""
	}, own: 200, other: 400, master: 200, listing: true},
	{method: "GET", pattern: "/stats", req: fixed("/stats"), own: 200, other: 200, master: 200, listing: true},
	// A stream never ends by itself: a malformed one answers at once,
	// after the role check (TestStreamScope follows a real one).
	{method: "GET", pattern: "/stream", req: fixed("/stream?type=bogus"), own: 400, other: 400, master: 400},
	{method: "GET", pattern: "/explain", req: func(_ *testing.T, w *orgWorld, _, own bool) (string, string) {
		return "/explain?" + url.Values{"host": {"x." + w.suffix(own)}}.Encode(), ""
	}, own: 200, other: 404, master: 200},
	{method: "GET", pattern: "/whoami", req: fixed("/whoami"), own: 200, other: 200, master: 200},
	{method: "GET", pattern: "/openapi.json", req: fixed("/openapi.json"), own: 200, other: 200, master: 200},
}

// TestCrossOrgMatrix calls every route as every role of organization a,
// by admin key, by a key session of that key and by a login session that
// admin_oidc_roles maps to that role (each session with its CSRF token),
// at a's records and at b's, and as the master token and its key session,
// and checks the exact status: none ever reaches another organization's
// records (404 for their IDs, 403 for hostnames it does not own, 400 for
// org_id), a listing never shows them, and a session answers exactly as
// the key (or token) it stands for.
func TestCrossOrgMatrix(t *testing.T) {
	w := newOrgWorld(t)
	api, err := admin.New(admin.Config{MasterToken: masterToken, Store: w.f.db})
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, mc := range matrix {
		covered[mc.method+" "+mc.pattern] = true
	}
	for route := range api.RolesForTest() {
		if !covered[route] {
			t.Errorf("route %s is missing from the cross-org matrix", route)
		}
	}
	rank := map[string]int{"none": 0, "viewer": 1, "operator": 2, "admin": 3, "master": 4}
	for _, mc := range matrix {
		min := api.RolesForTest()[mc.method+" "+mc.pattern]
		for _, who := range []string{"viewer", "operator", "admin", "master", "oidc-viewer", "oidc-operator", "oidc-admin",
			"ks-viewer", "ks-operator", "ks-admin", "ks-master"} {
			for _, own := range []bool{true, false} {
				target := map[bool]string{true: "own", false: "other"}[own]
				t.Run(fmt.Sprintf("%s %s/%s/%s", mc.method, mc.pattern, who, target), func(t *testing.T) {
					role, session := strings.CutPrefix(who, "oidc-")
					role, keySession := strings.CutPrefix(role, "ks-")
					master := role == "master"
					path, body := mc.req(t, w, master, own)
					want := mc.own
					switch {
					case master:
						want = mc.master
					case rank[role] < rank[min]:
						want = http.StatusForbidden
					case !own:
						want = mc.other
					}
					var status int
					var data []byte
					switch {
					case session:
						status, data = w.sessions[role].api(t, mc.method, path, body)
					case keySession:
						status, data = w.keySessions[role].api(t, mc.method, path, body)
					default:
						status, data = w.f.call(t, mc.method, path, w.keys[who], body)
					}
					if status != want {
						t.Fatalf("%s %s as %s = %d %s, want %d", mc.method, path, who, status, data, want)
					}
					if mc.listing && !master {
						for _, id := range append(w.bRecords, w.b) {
							if regexp.MustCompile(`\b` + regexp.QuoteMeta(id) + `\b`).Match(data) {
								t.Errorf("%s as %s shows %s of organization b", path, who, id)
							}
						}
					}
				})
			}
		}
	}
}

// fakePorts lists a fixed set of public ports. Its entries admit
// visitors from 10.0.0.0/8 only; off is a server without tcp_port_range.
type fakePorts struct {
	list []admin.PortInfo
	off  bool
}

func (f *fakePorts) Ports() []admin.PortInfo { return append([]admin.PortInfo(nil), f.list...) }

func (f *fakePorts) Explain(num int, proto string, ip netip.Addr) (admin.PortInfo, []string, bool, bool) {
	if f.off {
		return admin.PortInfo{}, nil, false, false
	}
	for _, p := range f.list {
		if p.Port == num && p.Protocol == proto {
			if ip.IsValid() && !netip.MustParsePrefix("10.0.0.0/8").Contains(ip) {
				return p, nil, true, true
			}
			return p, p.Names, true, true
		}
	}
	return admin.PortInfo{}, nil, false, true
}

// TestExplainPort: GET /ports/explain says whether a port is open for the
// caller and which entries would take a visitor, answers another
// organization's port as not open, and refuses bad parameters.
func TestExplainPort(t *testing.T) {
	base := newFixture(t)
	a, b := base.org(t, "a"), base.org(t, "b")
	fp := &fakePorts{list: []admin.PortInfo{
		{Port: 2222, Protocol: "tcp", OrgID: a, Names: []string{"ssh"}},
		{Port: 5353, Protocol: "udp", OrgID: b, Names: []string{"theirs"}},
	}}
	f := base.withConfig(t, admin.Config{Ports: fp})
	key := f.key(t, a, "viewer").Secret
	for _, tc := range []struct {
		query, cred string
		open        bool
		verdict     string
	}{
		{"port=2222&protocol=tcp", key, true, "open: 1 entry (ssh)"},
		{"port=2222", key, true, "open: 1 entry"},
		{"port=2222&ip=10.1.2.3", key, true, "relayed to ssh"},
		{"port=2222&ip=192.0.2.1", key, true, "exclude 192.0.2.1"},
		{"port=2223&protocol=tcp", key, false, "no client holds 2223/tcp"},
		{"port=5353&protocol=udp", key, false, "no client holds 5353/udp"},
		{"port=5353&protocol=udp", masterToken, true, "open: 1 entry (theirs)"},
	} {
		var ex admin.PortExplanation
		f.expect(t, "GET", "/ports/explain?"+tc.query, tc.cred, "", http.StatusOK, &ex)
		if ex.Open != tc.open || !strings.Contains(ex.Verdict, tc.verdict) {
			t.Errorf("explain %s = %+v, want open %v and %q", tc.query, ex, tc.open, tc.verdict)
		}
		if !tc.open && (len(ex.Names) != 0 || strings.Contains(ex.Verdict, "theirs")) {
			t.Errorf("explain %s shows another organization's entries: %+v", tc.query, ex)
		}
	}
	for _, q := range []string{"", "port=0", "port=65536", "port=x", "port=22&protocol=sctp", "port=22&ip=not-an-ip", "port=" + strings.Repeat("9", 5000)} {
		if status, body := f.call(t, "GET", "/ports/explain?"+q, key, ""); status != http.StatusBadRequest || len(body) > 1000 {
			t.Errorf("explain ?%.40s = %d (%d bytes), want a short 400", q, status, len(body))
		}
	}
	fp.off = true
	var ex admin.PortExplanation
	f.expect(t, "GET", "/ports/explain?port=2222", key, "", http.StatusOK, &ex)
	if ex.Open || !strings.Contains(ex.Verdict, "tcp_port_range is off") {
		t.Errorf("explain without tcp_port_range = %+v", ex)
	}
}

// TestListPorts: GET /ports shows a key its organization's ports only,
// the master token every port, sorted; a server with no ports answers an
// empty list, and a caller without credentials gets 401.
func TestListPorts(t *testing.T) {
	base := newFixture(t)
	a, b := base.org(t, "a"), base.org(t, "b")
	fp := &fakePorts{list: []admin.PortInfo{
		{Port: 5353, Protocol: "udp", OrgID: a, Names: []string{"dns"}, Open: 3},
		{Port: 2222, Protocol: "tcp", OrgID: b, Names: []string{"theirs"}},
		{Port: 2222, Protocol: "udp", OrgID: a},
	}}
	f := base.withConfig(t, admin.Config{Ports: fp})
	var got []admin.PortInfo
	f.expect(t, "GET", "/ports", f.key(t, a, "viewer").Secret, "", http.StatusOK, &got)
	if len(got) != 2 || got[0].Port != 2222 || got[0].Protocol != "udp" || got[1].Port != 5353 || got[1].Open != 3 {
		t.Fatalf("GET /ports as a = %+v, want a's two ports by number", got)
	}
	if got[0].Names == nil || got[0].Sessions == nil {
		t.Fatal("empty lists are null, want []")
	}
	f.expect(t, "GET", "/ports", masterToken, "", http.StatusOK, &got)
	if len(got) != 3 || got[0].OrgID != b {
		t.Fatalf("GET /ports as master = %+v, want all three, tcp 2222 first", got)
	}
	if status, _ := f.call(t, "GET", "/ports", "", ""); status != http.StatusUnauthorized {
		t.Fatalf("GET /ports without credentials = %d, want 401", status)
	}
	empty := base.withConfig(t, admin.Config{})
	var none []admin.PortInfo
	empty.expect(t, "GET", "/ports", masterToken, "", http.StatusOK, &none)
	if none == nil || len(none) != 0 {
		t.Fatalf("GET /ports without ports = %v, want []", none)
	}
}
