package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin"
)

// TestClientDisable: an operator disables and enables a client of its
// organization, GET /clients shows it, each change is audited; a viewer
// may not, and hostile or unknown ids answer 400 and 404.
func TestClientDisable(t *testing.T) {
	base := newFixture(t)
	f := base.withConfig(t, admin.Config{Clients: base.clients, Disabler: base.clients})
	f.clients = base.clients
	org := f.org(t, "acme")
	op := f.key(t, org, "operator").Secret
	viewer := f.key(t, org, "viewer").Secret
	f.clients.set(admin.ClientInfo{ID: "cli_1", Name: "web", OrgID: org, Hostnames: []string{"a.test"}})

	f.expect(t, "POST", "/clients/cli_1/disable", op, "", http.StatusNoContent, nil)
	var got []admin.ClientInfo
	f.expect(t, "GET", "/clients", op, "", http.StatusOK, &got)
	if len(got) != 1 || !got[0].Disabled {
		t.Fatalf("GET /clients after disable = %+v, want cli_1 disabled", got)
	}
	f.expect(t, "POST", "/clients/cli_1/enable", op, "", http.StatusNoContent, nil)
	f.expect(t, "GET", "/clients", op, "", http.StatusOK, &got)
	if len(got) != 1 || got[0].Disabled {
		t.Fatalf("GET /clients after enable = %+v, want cli_1 enabled", got)
	}
	var events []string
	for _, e := range f.audit(t) {
		if strings.HasPrefix(e.Event, "client_") {
			events = append(events, e.Event+" "+e.OrgID)
		}
	}
	if want := []string{admin.EventClientEnabled + " " + org, admin.EventClientDisabled + " " + org}; strings.Join(events, ",") != strings.Join(want, ",") {
		t.Errorf("audit events = %v, want %v (newest first)", events, want)
	}

	f.expectError(t, "POST", "/clients/cli_1/disable", viewer, "", http.StatusForbidden, "")
	f.expectError(t, "POST", "/clients/nobody/disable", op, "", http.StatusNotFound, "not found")
	f.expectError(t, "POST", "/clients/"+strings.Repeat("x", 300)+"/disable", op, "", http.StatusBadRequest, "at most 256")
}
