package serverconfig

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/aperio-dev/aperio/internal/server"
)

const oidcBlock = "server:\n  token: token-0123456789abcdef\noidc:\n  issuer: https://login.example.com\n  client_id: aperio\n  client_secret: s3cret\n"

// TestAdminOIDCRolesLoad: the file's list and the environment's one-line
// form give the same entries, with their lines from the file.
func TestAdminOIDCRolesLoad(t *testing.T) {
	file := oidcBlock + "admin_oidc: true\nadmin_oidc_roles:\n  - email: a@x.test\n    org: acme\n    role: admin\n  - {domain: x.test, org: default, role: viewer}\n  - group: ops\n    org: acme\n    role: operator\n"
	c, _, err := Load(Options{ReadFile: filesOf(map[string]string{File: file})})
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	want := []server.AdminOIDCRole{
		{Line: 9, Email: "a@x.test", Org: "acme", Role: "admin"},
		{Line: 12, Domain: "x.test", Org: "default", Role: "viewer"},
		{Line: 13, Group: "ops", Org: "acme", Role: "operator"},
	}
	if !c.AdminOIDC {
		t.Errorf("admin_oidc = false, want true")
	}
	if d := cmp.Diff(want, c.AdminOIDCRoles); d != "" {
		t.Errorf("admin_oidc_roles from the file (-want +got):\n%s", d)
	}

	env := map[string]string{
		"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_OIDC_ISSUER": "https://login.example.com",
		"APERIO_OIDC_CLIENT_ID": "aperio", "APERIO_OIDC_CLIENT_SECRET": "s3cret", "APERIO_ADMIN_OIDC": "true",
		"APERIO_ADMIN_OIDC_ROLES": "email=a@x.test,org=acme,role=admin; domain=x.test,org=default,role=Viewer;group=ops,org=acme,role=operator",
	}
	c, _, err = Load(Options{Env: envOf(env), ReadFile: filesOf(nil)})
	if err != nil {
		t.Fatalf("Load from the environment = %v", err)
	}
	for i := range want {
		want[i].Line = 0
	}
	if d := cmp.Diff(want, c.AdminOIDCRoles); d != "" {
		t.Errorf("admin_oidc_roles from the environment (-want +got):\n%s", d)
	}
}

// TestAdminOIDCRolesRefused: each bad entry is refused naming the key,
// the entry's index and its line; admin_oidc without the oidc: block is
// refused; so is the environment's form misspelled.
func TestAdminOIDCRolesRefused(t *testing.T) {
	many := "admin_oidc_roles:\n"
	for i := range 257 {
		many += fmt.Sprintf("  - {email: u%d@x.test, org: acme, role: viewer}\n", i)
	}
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"no matcher", oidcBlock + "admin_oidc_roles:\n  - org: acme\n    role: admin\n", nil,
			"admin_oidc_roles (aperio-server.yaml:7): [0] (line 8): names no user: set one of email, domain, group"},
		{"two matchers", oidcBlock + "admin_oidc_roles:\n  - {email: a@x.test, org: acme, role: admin}\n  - {email: a@x.test, group: ops, org: acme, role: admin}\n", nil,
			"[1] (line 9): sets more than one of email, domain, group"},
		{"role master", oidcBlock + "admin_oidc_roles:\n  - {email: a@x.test, org: acme, role: master}\n", nil,
			"[0] (line 8): role master is never granted through a login"},
		{"unknown role", oidcBlock + "admin_oidc_roles:\n  - {email: a@x.test, org: acme, role: owner}\n", nil,
			`[0] (line 8): role "owner" is not one of viewer, operator, admin`},
		{"no org", oidcBlock + "admin_oidc_roles:\n  - {domain: x.test, role: viewer}\n", nil, "[0] (line 8): org is required"},
		{"bad email", oidcBlock + "admin_oidc_roles:\n  - {email: nobody, org: acme, role: viewer}\n", nil, `[0] (line 8): email "nobody" is not an email address`},
		{"unknown field", oidcBlock + "admin_oidc_roles:\n  - {mail: a@x.test, org: acme, role: viewer}\n", nil, `line 8: unknown key "mail"`},
		{"257 entries", oidcBlock + many, nil, "admin_oidc_roles (aperio-server.yaml:7): has 257 entries, limit 256"},
		{"admin_oidc without oidc", "server:\n  token: token-0123456789abcdef\nadmin_oidc: true\n", nil,
			"admin_oidc (aperio-server.yaml:3): needs the oidc: block"},
		{"env unknown field", "", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_ADMIN_OIDC_ROLES": "mail=a@x.test,org=a,role=admin"},
			`APERIO_ADMIN_OIDC_ROLES`},
		{"env role master", "", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_ADMIN_OIDC_ROLES": "email=a@x.test,org=a,role=admin;email=b@x.test,org=a,role=master"},
			`admin_oidc_roles (env APERIO_ADMIN_OIDC_ROLES): [1]: role master is never granted`},
		{"env empty entry", "", map[string]string{"APERIO_SERVER_TOKEN": "token-0123456789abcdef", "APERIO_ADMIN_OIDC_ROLES": "email=a@x.test,org=a,role=admin;;"},
			`entry 1 is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.file != "" {
				files[File] = tc.file
			}
			_, _, err := Load(Options{Env: envOf(tc.env), ReadFile: filesOf(files)})
			if err == nil {
				t.Fatalf("Load = nil, want an error containing %q", tc.want)
			}
			msgs := problems(t, err)
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("Load problems = %q, want one containing %q", msgs, tc.want)
			}
		})
	}
}
