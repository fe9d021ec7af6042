package oidc

import (
	"slices"
	"strings"
	"testing"
)

func TestPolicyAllows(t *testing.T) {
	verified := Session{Email: "jane.doe@example.com", EmailVerified: true}
	unverified := Session{Email: "jane.doe@example.com"}
	grouped := Session{Subject: "42", Groups: []string{"design"}}
	for _, tc := range []struct {
		name   string
		policy Policy
		s      Session
		want   bool
	}{
		{"open admits anyone", Policy{}, unverified, true},
		{"email, other case", Policy{AllowedEmails: []string{"JANE.DOE@Example.COM"}}, verified, true},
		{"email, unverified", Policy{AllowedEmails: []string{"jane.doe@example.com"}}, unverified, false},
		{"email, other address", Policy{AllowedEmails: []string{"john@example.com"}}, verified, false},
		{"domain", Policy{AllowedDomains: []string{"example.com"}}, verified, true},
		{"domain, unverified", Policy{AllowedDomains: []string{"example.com"}}, unverified, false},
		{"domain, not a subdomain", Policy{AllowedDomains: []string{"example.com"}}, Session{Email: "a@x.example.com", EmailVerified: true}, false},
		{"domain, not a suffix", Policy{AllowedDomains: []string{"example.com"}}, Session{Email: "a@badexample.com", EmailVerified: true}, false},
		{"domain of the last @", Policy{AllowedDomains: []string{"example.com"}}, Session{Email: "a@example.com@evil.example", EmailVerified: true}, false},
		{"group", Policy{Groups: []string{"ops", "design"}}, grouped, true},
		{"group is case-sensitive", Policy{Groups: []string{"Design"}}, grouped, false},
		{"group, none", Policy{Groups: []string{"ops"}}, verified, false},
		{"any rule suffices", Policy{AllowedEmails: []string{"x@y.z"}, Groups: []string{"design"}}, grouped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.Allows(&tc.s); got != tc.want {
				t.Errorf("%+v.Allows(%+v) = %v, want %v", tc.policy, tc.s, got, tc.want)
			}
		})
	}
}

func TestPolicyKeptGroups(t *testing.T) {
	p := Policy{Groups: []string{"a", "b"}}
	if got := p.keptGroups([]string{"x", "b", "y", "a"}); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("keptGroups = %q, want [b a]", got)
	}
	many := make([]string, 100)
	for i := range many {
		many[i] = strings.Repeat("g", i+1)
	}
	all := Policy{Groups: many}
	if got := all.keptGroups(many); len(got) != maxGroups {
		t.Errorf("keptGroups kept %d of 100 named groups, want the bound %d", len(got), maxGroups)
	}
	if got := (&Policy{}).keptGroups(many); got != nil {
		t.Errorf("a policy without groups kept %q", got)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Policy{AllowedEmails: []string{"jane@example.com"}, AllowedDomains: []string{"example.com"}, Groups: []string{"ops"}}).Validate(); err != nil {
		t.Fatalf("Validate(good) = %v", err)
	}
	for _, tc := range []struct {
		name string
		p    Policy
	}{
		{"email without @", Policy{AllowedEmails: []string{"jane"}}},
		{"email with two @", Policy{AllowedEmails: []string{"a@b@example.com"}}},
		{"email without local part", Policy{AllowedEmails: []string{"@example.com"}}},
		{"email with bad domain", Policy{AllowedEmails: []string{"a@exa mple.com"}}},
		{"email wildcard", Policy{AllowedEmails: []string{"a@*.example.com"}}},
		{"domain with @", Policy{AllowedDomains: []string{"@example.com"}}},
		{"domain wildcard", Policy{AllowedDomains: []string{"*.example.com"}}},
		{"domain empty", Policy{AllowedDomains: []string{""}}},
		{"group empty", Policy{Groups: []string{""}}},
		{"group long", Policy{Groups: []string{strings.Repeat("g", 256)}}},
		{"too many entries", Policy{Groups: slices.Repeat([]string{"g"}, maxPolicyEntries+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", tc.p)
			}
		})
	}
}
