package dashboard

import (
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestHeaderAdminMenu: the credentials and organization pages sit in the
// header's Admin menu (a disclosure), the others in its own row; a role
// that sees none of them gets no menu; an admin page marks the menu.
func TestHeaderAdminMenu(t *testing.T) {
	u, _, _ := newTestUI(t)
	b := render(t, u, "traffic", apitype.Master)
	menu := strings.Index(b, `<details id="nav-admin">`)
	if menu < 0 {
		t.Fatalf("the master's header has no Admin menu")
	}
	head := b[:strings.Index(b, "</header>")]
	for _, p := range []string{"tokens", "keys", "orgs", "webhooks"} {
		if i := strings.Index(head, `href="/aperio/ui/`+p+`"`); i < menu {
			t.Errorf("the %s page's link is not in the Admin menu (at %d, menu at %d)", p, i, menu)
		}
	}
	for _, p := range []string{"clients", "traffic", "scaling", "audit", "explain"} {
		if i := strings.Index(head, `href="/aperio/ui/`+p+`"`); i < 0 || i > menu {
			t.Errorf("the %s page's link is not in the header's row (at %d, menu at %d)", p, i, menu)
		}
	}
	lacks(t, "traffic page's header", head, `<summary class="current">`)
	contains(t, "keys page's header", render(t, u, "keys", apitype.RoleAdmin), `<summary class="current">`)
}

// TestHeaderIdentity: the header names the master token as such, and a
// key by its id beside its role, never "master · master".
func TestHeaderIdentity(t *testing.T) {
	u, _, _ := newTestUI(t)
	b := render(t, u, "traffic", apitype.Master)
	contains(t, "master's header", b, `id="identity" title="Signed in as key:k1">master token</span>`)
	lacks(t, "master's header", b, "· <span data-testid=\"role\">master")
	contains(t, "admin's header", render(t, u, "traffic", apitype.RoleAdmin), `>key k1 · <span data-testid="role">admin</span>`)
	contains(t, "German master's header", render(t, u, "traffic", apitype.Master, "Accept-Language", "de"), `>Master-Token</span>`)
	mustLoad(t, u)
	for actor, want := range map[string]string{"oidc:ana@example.com": "ana@example.com", "key:k_abc": "key k_abc", "someone": "someone"} {
		v := &view{Ctx: &Ctx{Who: apitype.WhoAmI{Actor: actor, Role: apitype.RoleViewer}, Lang: "en", u: u}}
		if got := v.Identity(); got != want {
			t.Errorf("Identity(%q) = %q, want %q", actor, got, want)
		}
	}
}

// TestClientsRefusedNone: a client whose binds were all accepted reads
// "None" under refused binds, not "None yet." (which reads as if
// refusals were expected); the script draws the same word.
func TestClientsRefusedNone(t *testing.T) {
	u, _ := newOpsUI(t)
	b := render(t, u, "clients", apitype.RoleViewer)
	contains(t, "clients page", b, `<td>None</td>`, `data-refused-none="None"`)
	lacks(t, "clients page", b, "<td>None yet.</td>")
	contains(t, "German clients page", render(t, u, "clients", apitype.RoleOperator, "Accept-Language", "de"), `<td>Keine</td>`, `aria-label="web-1 entleeren">Entleeren</button>`)
}

// TestClientsAccessColumn: the clients page says which access control
// each service announced, in the page's language, "server default" for
// none, and a word it does not know as it is.
func TestClientsAccessColumn(t *testing.T) {
	u, api := newOpsUI(t)
	api.clients = []apitype.ClientInfo{
		{ID: "c1", Name: "guarded", Hostnames: []string{"a.test"}, Healthy: true, Access: []string{apitype.AccessAllowedIPs, apitype.AccessBasic}},
		{ID: "c2", Name: "open", Hostnames: []string{"b.test"}, Healthy: true, Access: []string{}},
		{ID: "c3", Name: "newer", Hostnames: []string{"c.test"}, Healthy: true, Access: []string{"<mtls>"}},
	}
	b := render(t, u, "clients", apitype.RoleViewer)
	contains(t, "clients page", b, `<th scope="col">Access</th>`,
		`<td data-cell="access">IP allowlist, basic auth</td>`,
		`<td data-cell="access"><span class="muted">server default</span></td>`,
		`<td data-cell="access">&lt;mtls&gt;</td>`,
		`data-access-default="server default"`, `&#34;oidc&#34;:&#34;OIDC login&#34;`)
	contains(t, "German clients page", render(t, u, "clients", apitype.RoleViewer, "Accept-Language", "de"),
		`<th scope="col">Zugang</th>`, `<td data-cell="access">IP-Erlaubnisliste, Basic Auth</td>`)
}

// TestClientsVersionColumn: the clients page shows each client's announced
// release, and says "not announced" for a client that predates the field.
func TestClientsVersionColumn(t *testing.T) {
	u, api := newOpsUI(t)
	api.clients = []apitype.ClientInfo{
		{ID: "c1", Name: "current", Hostnames: []string{"a.test"}, Healthy: true, Version: "v1.4.0"},
		{ID: "c2", Name: "older", Hostnames: []string{"b.test"}, Healthy: true},
	}
	contains(t, "clients page", render(t, u, "clients", apitype.RoleViewer), `<th scope="col">Version</th>`,
		`<td data-cell="version"><code>v1.4.0</code></td>`,
		`<td data-cell="version"><span class="muted">not announced</span></td>`,
		`data-version-unknown="not announced"`)
	contains(t, "German clients page", render(t, u, "clients", apitype.RoleViewer, "Accept-Language", "de"),
		`<td data-cell="version"><span class="muted">nicht gemeldet</span></td>`)
}
