package config

import (
	"strings"
	"testing"
	"time"
)

const testArgon = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"

// loadAccess loads a client file with one service whose access settings
// are extra (yaml lines indented under the service).
func loadAccess(t *testing.T, extra string) (Client, error) {
	t.Helper()
	file := "server:\n  url: https://tunnel.example.com\n  token: apr_x\nservices:\n  - target: 3000\n    hostname: app.example.com\n" + extra
	c, _, err := LoadClient(ClientOptions{
		Env:      envOf(nil),
		Hostname: func() (string, error) { return "h", nil },
		ReadFile: filesOf(map[string]string{ClientFile: file}),
	})
	return c, err
}

// TestClientAccessLoaded checks that every access key of a service is
// read into Service, durations parsed.
func TestClientAccessLoaded(t *testing.T) {
	c, err := loadAccess(t, `    allowed_ips: [10.0.0.0/8, 192.0.2.7]
    denied_ips: 10.9.0.0/16
    identity_jwt: true
    auth:
      basic:
        realm: staff
        users:
          ann: "`+testArgon+`"
      bearer:
        keys:
          ci: `+strings.Repeat("0f", 32)+`
      jwt:
        jwks_url: https://idp.example.com/jwks
        issuer: https://idp.example.com/
        audience: [app]
        claims: {groups: [ops]}
        timeout: 3s
      forward:
        url: https://auth.example.com/verify
        copy_headers: [Remote-User]
        user_header: Remote-User
        timeout: 2s
      oidc:
        allowed_domains: [example.com]
`)
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	s := c.Services[0]
	if len(s.AllowedIPs) != 2 || s.DeniedIPs[0] != "10.9.0.0/16" || !s.IdentityJWT {
		t.Fatalf("ip rules / identity_jwt = %v %v %v", s.AllowedIPs, s.DeniedIPs, s.IdentityJWT)
	}
	a := s.Auth
	if a == nil || a.Basic.Realm != "staff" || a.Basic.Users["ann"] != testArgon {
		t.Fatalf("auth.basic = %+v", a)
	}
	if a.JWT.Timeout != 3*time.Second || a.JWT.Claims["groups"][0] != "ops" || a.Forward.Timeout != 2*time.Second || a.OIDC.AllowedDomains[0] != "example.com" {
		t.Fatalf("auth = %+v %+v %+v", a.JWT, a.Forward, a.OIDC)
	}
	if got := strings.Join(a.Methods(), ","); got != "basic,bearer,jwt,forward,oidc" {
		t.Fatalf("Methods() = %s", got)
	}
}

// TestClientAccessRefused checks that each bad access setting is an
// error naming its key, and that a plain password is refused.
func TestClientAccessRefused(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"plain password", "    auth:\n      basic:\n        users:\n          ann: hunter22\n", "services[0].auth.basic.users.ann: is not an argon2id or bcrypt hash: plain passwords are refused"},
		{"truncated bcrypt", "    auth:\n      basic:\n        users:\n          ann: \"$2b$10$abc\"\n", "services[0].auth.basic.users.ann: is not an argon2id"},
		{"no users", "    auth:\n      basic:\n        realm: x\n", "services[0].auth.basic.users: required"},
		// The file's line and the allowed keys, never a Go type (issue 39).
		{"unknown method", "    auth:\n      basik:\n        realm: x\n", `services[0].auth (aperio.yaml:7): line 8: unknown key "basik", did you mean basic? (want one of basic, bearer, forward, jwt, oidc)`},
		{"unknown key in method", "    auth:\n      jwt:\n        jwks: https://x/\n", `services[0].auth (aperio.yaml:7): line 9: unknown key "jwks" (want one of algorithms, audience, cache_ttl, claims, cookie, header, issuer, jwks_url, leeway, refresh_interval, timeout, user_claim)`},
		{"unknown key in basic", "    auth:\n      basic:\n        realm: staff\n        bogus: 1\n", `services[0].auth (aperio.yaml:7): line 10: unknown key "bogus" (want one of realm, users)`},
		{"wrong shape", "    auth:\n      basic:\n        users: [ann]\n", `services[0].auth (aperio.yaml:7): line 9: expected a block of name: value, got a list`},
		{"wrong scalar", "    auth:\n      jwt:\n        jwks_url: https://x/jwks\n        issuer: i\n        audience: [a]\n        timeout: soon\n", `line 12: expected a duration (30s, 5m), got a string`},
		{"auth not a block", "    auth: basic\n", "expected a block of methods"},
		{"empty auth", "    auth: {}\n", "services[0].auth (aperio.yaml:7): declares no method"},
		{"bearer key in clear", "    auth:\n      bearer:\n        keys:\n          ci: my-secret-key\n", "services[0].auth.bearer.keys.ci: is not a hex SHA-256 digest"},
		{"jwt without issuer", "    auth:\n      jwt:\n        jwks_url: https://x/jwks\n        audience: [a]\n", "services[0].auth.jwt.issuer: required"},
		{"jwt bad algorithm", "    auth:\n      jwt:\n        jwks_url: https://x/jwks\n        issuer: i\n        audience: [a]\n        algorithms: [HS256]\n", "\"HS256\" is not one of"},
		{"jwt long timeout", "    auth:\n      jwt:\n        jwks_url: https://x/jwks\n        issuer: i\n        audience: [a]\n        timeout: 2m\n", "services[0].auth.jwt.timeout: 2m is outside"},
		{"forward copies aperio header", "    auth:\n      forward:\n        url: https://a/\n        copy_headers: [X-Aperio-User]\n", "X-Aperio-* headers are the server's own"},
		{"forward bad url", "    auth:\n      forward:\n        url: ftp://a/\n", "services[0].auth.forward.url"},
		{"oidc names nobody", "    auth:\n      oidc: {}\n", "services[0].auth.oidc: names nobody"},
		{"public with auth", "    public: true\n    auth:\n      bearer:\n        keys:\n          ci: " + strings.Repeat("0f", 32) + "\n", "services[0].public (aperio.yaml:7): cannot be combined with auth"},
		{"bad cidr", "    allowed_ips: [10.0.0.0/33]\n", "services[0].allowed_ips (aperio.yaml:7): \"10.0.0.0/33\" is neither"},
		{"identity without auth", "    identity_jwt: true\n", "services[0].identity_jwt (aperio.yaml:7): needs an auth: block"},
		// The server's own bounds, which the loader once let through.
		{"oidc past the server's bound", "    auth:\n      oidc:\n        allowed_domains: [" + strings.Repeat("example.com, ", 256) + "example.com]\n", "services[0].auth.oidc.allowed_domains: 257 entries, at most 256"},
		{"issuer not printable", "    auth:\n      jwt:\n        jwks_url: https://x/jwks\n        issuer: \"i\\u202e\"\n        audience: [a]\n", "services[0].auth.jwt.issuer: longer than 1024 bytes or not printable"},
		{"long realm", "    auth:\n      basic:\n        realm: " + strings.Repeat("r", 129) + "\n        users:\n          ann: \"" + testArgon + "\"\n", "services[0].auth.basic.realm: longer than 128 bytes"},
		{"bearer key name with a tab", "    auth:\n      bearer:\n        keys:\n          \"c\\ti\": " + strings.Repeat("0f", 32) + "\n", `services[0].auth.bearer.keys: key "c\ti": a name is 1 to 256 printable bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadAccess(t, tt.yaml)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadClient error = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "config.") || strings.Contains(err.Error(), "in type") || strings.Contains(err.Error(), "map[") || strings.Contains(err.Error(), "time.") {
				t.Errorf("LoadClient error = %v names a Go type", err)
			}
		})
	}
}

// TestClientAccessTopLevelHint checks that an access key written at the
// top level is pointed to services:.
func TestClientAccessTopLevelHint(t *testing.T) {
	_, _, err := LoadClient(ClientOptions{
		Env:      envOf(withBase(map[string]string{"APERIO_TARGET": "1", "APERIO_HOSTNAME": "a.example.com"})),
		ReadFile: filesOf(map[string]string{ClientFile: "public: true\n"}),
	})
	if err == nil || !strings.Contains(err.Error(), "public is a per-service setting") {
		t.Fatalf("LoadClient error = %v, want the per-service hint", err)
	}
}
