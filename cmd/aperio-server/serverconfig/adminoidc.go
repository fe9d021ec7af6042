package serverconfig

import (
	"fmt"
	"strings"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/server"
)

// adminOIDCRolesKey is the key of the admin login's role mapping.
const adminOIDCRolesKey = "admin_oidc_roles"

// parseAdminOIDCRoles reads admin_oidc_roles' one-line form, for the
// environment: entries separated by ';', each "field=value" pairs
// separated by ',' (email, domain, group, org, role), as in
// "email=a@x.test,org=acme,role=admin;domain=x.test,org=default,role=viewer".
// It checks the spelling only; check judges the entries.
func parseAdminOIDCRoles(s string) ([]server.AdminOIDCRole, error) {
	var out []server.AdminOIDCRole
	for i, entry := range strings.Split(s, ";") {
		if i == admin.MaxOIDCRoles {
			return nil, fmt.Errorf("more than %d entries", admin.MaxOIDCRoles)
		}
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, fmt.Errorf("entry %d is empty", i)
		}
		var r server.AdminOIDCRole
		seen := map[string]bool{}
		for pair := range strings.SplitSeq(entry, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			k = strings.ToLower(strings.TrimSpace(k))
			if !ok {
				return nil, fmt.Errorf("entry %d: %q is not field=value", i, pair)
			}
			if seen[k] {
				return nil, fmt.Errorf("entry %d: %s given twice", i, k)
			}
			seen[k] = true
			v = strings.TrimSpace(v)
			switch k {
			case "email":
				r.Email = v
			case "domain":
				r.Domain = v
			case "group":
				r.Group = v
			case "org":
				r.Org = v
			case "role":
				r.Role = strings.ToLower(v)
			default:
				return nil, fmt.Errorf("entry %d: unknown field %q (want email, domain, group, org, role)", i, k)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// adminOIDCProblems checks admin_oidc and admin_oidc_roles: the login
// needs the oidc: block; each entry is valid, named by its index and its
// line in the file.
func adminOIDCProblems(s Config, v *config.Checker) {
	if s.AdminOIDC && s.OIDC.Issuer == "" {
		v.Add("admin_oidc", "needs the oidc: block (oidc.issuer, oidc.client_id, oidc.client_secret): the admin login goes through that provider")
	}
	roles := s.AdminOIDCRoles
	if len(roles) > admin.MaxOIDCRoles {
		v.Add(adminOIDCRolesKey, "has %d entries, limit %d", len(roles), admin.MaxOIDCRoles)
	}
	for i, r := range roles {
		err := r.Entry().Check()
		if err == nil {
			continue
		}
		where := fmt.Sprintf("[%d]", i)
		if r.Line > 0 {
			where += fmt.Sprintf(" (line %d)", r.Line)
		}
		for _, msg := range strings.Split(err.Error(), "\n") {
			v.Add(adminOIDCRolesKey, "%s: %s", where, msg)
		}
	}
}
