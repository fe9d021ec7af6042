package oidc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aperio-dev/aperio/internal/hostname"
)

// maxPolicyEntries bounds each list of a Policy, so that checking one on
// every request stays a short scan.
const maxPolicyEntries = 256

// Policy is a service's `auth: {oidc: {...}}`: who, among the users the
// provider logs in, may reach it. A user passes when their verified email
// is in AllowedEmails, or the domain of their verified email is in
// AllowedDomains, or one of their groups is in Groups. The zero Policy
// admits every user the provider logs in. A Policy is read-only once in
// use and safe for concurrent use.
type Policy struct {
	// AllowedEmails are full addresses, compared without regard to case.
	AllowedEmails []string
	// AllowedDomains are email domains ("example.com"), compared without
	// regard to case; a domain does not admit its subdomains.
	AllowedDomains []string
	// Groups are group names as the provider's groups claim spells them,
	// compared exactly.
	Groups []string
}

// Validate reports every malformed entry of p: an email without exactly
// one '@' or with an invalid domain, an invalid domain, an empty or long
// group, or more than 256 entries in a list.
func (p Policy) Validate() error {
	var errs []error
	for _, l := range []struct {
		name string
		n    int
	}{{"allowed_emails", len(p.AllowedEmails)}, {"allowed_domains", len(p.AllowedDomains)}, {"groups", len(p.Groups)}} {
		if l.n > maxPolicyEntries {
			errs = append(errs, fmt.Errorf("oidc: %s has %d entries, limit %d", l.name, l.n, maxPolicyEntries))
		}
	}
	for _, e := range p.AllowedEmails {
		local, domain, ok := strings.Cut(e, "@")
		if !ok || local == "" || strings.Contains(domain, "@") || len(e) > maxEmailBytes || hostname.Validate(domain) != nil || strings.HasPrefix(domain, "*.") {
			errs = append(errs, fmt.Errorf("oidc: allowed_emails: %q is not an email address", e))
		}
	}
	for _, d := range p.AllowedDomains {
		if hostname.Validate(d) != nil || strings.HasPrefix(d, "*.") {
			errs = append(errs, fmt.Errorf("oidc: allowed_domains: %q is not a domain", d))
		}
	}
	for _, g := range p.Groups {
		if g == "" || len(g) > maxGroupBytes {
			errs = append(errs, fmt.Errorf("oidc: groups: entry of %d bytes, want 1 to %d", len(g), maxGroupBytes))
		}
	}
	return errors.Join(errs...)
}

// open reports whether p admits every user the provider logs in.
func (p *Policy) open() bool {
	return len(p.AllowedEmails) == 0 && len(p.AllowedDomains) == 0 && len(p.Groups) == 0
}

// Allows reports whether s passes p. It allocates nothing.
func (p *Policy) Allows(s *Session) bool {
	if p.open() {
		return true
	}
	if s.EmailVerified && s.Email != "" {
		for _, e := range p.AllowedEmails {
			if strings.EqualFold(e, s.Email) {
				return true
			}
		}
		if i := strings.LastIndexByte(s.Email, '@'); i >= 0 {
			domain := s.Email[i+1:]
			for _, d := range p.AllowedDomains {
				if strings.EqualFold(d, domain) {
					return true
				}
			}
		}
	}
	for _, g := range s.Groups {
		for _, want := range p.Groups {
			if g == want {
				return true
			}
		}
	}
	return false
}

// keptGroups returns the groups among claimed that p names, at most
// maxGroups: one is enough to pass, so a user in many named groups loses
// nothing by the cut. It runs once per login, over however many groups
// the provider claims, so it looks them up in a set.
func (p *Policy) keptGroups(claimed []string) []string {
	if len(p.Groups) == 0 {
		return nil
	}
	named := make(map[string]struct{}, len(p.Groups))
	for _, g := range p.Groups {
		named[g] = struct{}{}
	}
	var kept []string
	for _, g := range claimed {
		if _, ok := named[g]; ok {
			kept = append(kept, g)
			if len(kept) == maxGroups {
				break
			}
		}
	}
	return kept
}
