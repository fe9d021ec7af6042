package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestClientsDrainButtons: an operator gets Drain beside Disable on the
// first row of each connection whose client does not announce draining
// yet (web-1 and the worker of opsClients), with a confirmation; a viewer
// gets none.
func TestClientsDrainButtons(t *testing.T) {
	u, _ := newOpsUI(t)
	op := get(t, u, UIPrefix+"clients", apitype.RoleOperator).Body.String()
	if n := strings.Count(op, `data-action="drain"`); n != 2 {
		t.Errorf("operator's page has %d drain buttons, want 2 (one per connection not draining)", n)
	}
	// Drain is graceful: a secondary button; Disable, which stops the
	// routing at once, stays the danger one.
	for _, want := range []string{`action="/aperio/ui/clients/drain"`, `data-confirm="Drain web-1?`, `aria-label="Drain web-1"`, `aria-label="Drain worker"`,
		`<button type="submit" class="secondary" data-action="drain"`, `<button type="submit" class="danger" data-action="disable"`} {
		if !strings.Contains(op, want) {
			t.Errorf("operator's clients page lacks %q", want)
		}
	}
	vb := get(t, u, UIPrefix+"clients", apitype.RoleViewer).Body.String()
	for _, bad := range []string{`data-action="drain"`, "/aperio/ui/clients/drain"} {
		if strings.Contains(vb, bad) {
			t.Errorf("a viewer's clients page has a write control: %q", bad)
		}
	}
}

// TestClientsDrainButtonHidden: a client that already announces draining
// offers no Drain button but keeps Disable, and a viewer's POST to drain
// is refused by the API with its message, reaching it only as that one
// call.
func TestClientsDrainButtonHidden(t *testing.T) {
	u, api := newOpsUI(t)
	api.clients = []apitype.ClientInfo{{ID: "c5", Name: "leaving", Hostnames: []string{"a.test"}, Healthy: true, Draining: true}}
	op := get(t, u, UIPrefix+"clients", apitype.RoleOperator).Body.String()
	if strings.Contains(op, `data-action="drain"`) {
		t.Error("a draining client offers a Drain button")
	}
	if !strings.Contains(op, `data-action="disable"`) {
		t.Error("a draining client lost its Disable button")
	}
	w := post(t, u, UIPrefix+"clients/drain", apitype.RoleViewer, url.Values{"csrf": {"tok-viewer"}, "id": {"c5"}})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "operator role") {
		t.Errorf("viewer drain = %d, want 403 with the API's message; body %s", w.Code, w.Body)
	}
	if got, want := strings.Join(api.posts(), "; "), "POST /aperio/api/clients/c5/drain csrf=tok-viewer"; got != want {
		t.Errorf("API calls = %q, want %q", got, want)
	}
}
