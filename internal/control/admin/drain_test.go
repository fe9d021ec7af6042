package admin_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
)

// TestClientDrain: an operator asks a client of its organization to
// retire; the drainer hears it once per call, each call is audited as
// client_drain, and asking twice answers 204 again. A viewer may not,
// another organization's client and an unknown one answer 404 without
// reaching the drainer, a hostile id 400, and a server without a drainer
// 404.
func TestClientDrain(t *testing.T) {
	base := newFixture(t)
	f := base.withConfig(t, admin.Config{Clients: base.clients, Drainer: base.clients})
	f.clients = base.clients
	org := f.org(t, "acme")
	other := f.org(t, "other")
	op := f.key(t, org, "operator").Secret
	viewer := f.key(t, org, "viewer").Secret
	f.clients.set(
		admin.ClientInfo{ID: "cli_1", Name: "web", OrgID: org, Hostnames: []string{"a.test"}, RemoteAddr: "10.0.0.1:5000"},
		admin.ClientInfo{ID: "cli_2", Name: "theirs", OrgID: other, Hostnames: []string{"b.test"}},
	)

	f.expect(t, "POST", "/clients/cli_1/drain", op, "", http.StatusNoContent, nil)
	f.expect(t, "POST", "/clients/cli_1/drain", op, "", http.StatusNoContent, nil)
	f.expectError(t, "POST", "/clients/cli_1/drain", viewer, "", http.StatusForbidden, "")
	f.expectError(t, "POST", "/clients/cli_2/drain", op, "", http.StatusNotFound, "not found")
	f.expectError(t, "POST", "/clients/nobody/drain", op, "", http.StatusNotFound, "not found")
	f.expectError(t, "POST", "/clients/"+strings.Repeat("x", 300)+"/drain", op, "", http.StatusBadRequest, "at most 256")
	if got, want := f.clients.drains(), []string{"cli_1", "cli_1"}; !slices.Equal(got, want) {
		t.Errorf("DrainClient calls = %v, want %v", got, want)
	}

	var events []string
	for _, e := range f.audit(t) {
		if e.Event == admin.EventClientDrain {
			events = append(events, e.OrgID+" "+e.Detail)
		}
	}
	want := org + ` client cli_1 name="web" from 10.0.0.1:5000 asked to drain`
	if len(events) != 2 || events[0] != want || events[1] != want {
		t.Errorf("client_drain audit entries = %q, want two of %q", events, want)
	}

	none := base.withConfig(t, admin.Config{Clients: base.clients})
	noneOp := none.key(t, org, "operator").Secret
	none.expectError(t, "POST", "/clients/cli_1/drain", noneOp, "", http.StatusNotFound, "not found")
}
