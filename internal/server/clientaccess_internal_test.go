package server

import (
	"slices"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestAccessWords: GET /clients names which access controls a service
// announced, in apitype.AccessWords' order, and nothing else (no user,
// key, hash or address); none is an empty list, not null.
func TestAccessWords(t *testing.T) {
	for name, c := range map[string]struct {
		in   *tunnel.Access
		want []string
	}{
		"none":   {nil, []string{}},
		"empty":  {&tunnel.Access{}, []string{}},
		"public": {&tunnel.Access{Public: true}, []string{apitype.AccessPublic}},
		"basic behind an allowlist": {&tunnel.Access{AllowedIPs: []string{"10.0.0.0/8"}, Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{Users: map[string]string{"ana": "$argon2id$secret"}}}},
			[]string{apitype.AccessAllowedIPs, apitype.AccessBasic}},
		"every part": {&tunnel.Access{AllowedIPs: []string{"10.0.0.1"}, DeniedIPs: []string{"10.0.0.2"}, Auth: tunnel.Auth{Basic: &tunnel.BasicAuth{}, Bearer: &tunnel.BearerAuth{},
			JWT: &tunnel.JWTAuth{}, Forward: &tunnel.ForwardAuth{}, OIDC: &tunnel.OIDCAuth{}}},
			[]string{apitype.AccessAllowedIPs, apitype.AccessDeniedIPs, apitype.AccessBasic, apitype.AccessBearer, apitype.AccessJWT, apitype.AccessForward, apitype.AccessOIDC}},
	} {
		got := accessWords(c.in)
		if got == nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: accessWords = %#v, want %#v", name, got, c.want)
		}
		for _, w := range got {
			if !slices.Contains(apitype.AccessWords(), w) {
				t.Errorf("%s: word %q is not one of apitype.AccessWords", name, w)
			}
		}
	}
}
