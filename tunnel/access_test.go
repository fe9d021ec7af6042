package tunnel

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// accessAnnouncement is the test announcement with access on its service.
func accessAnnouncement(a *Access) Announcement {
	ann := testAnnouncement()
	ann.Services[0].Access = a
	return ann
}

func many(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func manyPairs(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("u%d", i)] = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"
	}
	return m
}

// TestAccessValidate checks that good access blocks pass and that each
// out-of-bounds or contradictory one is refused with a message naming
// what is wrong.
func TestAccessValidate(t *testing.T) {
	good := []*Access{
		nil,
		{},
		{Public: true, AllowedIPs: []string{"10.0.0.0/8"}, DeniedIPs: []string{"10.9.0.0/16"}},
		{Basic: &BasicAuth{Realm: "staff", Users: manyPairs(3)}, IdentityJWT: true},
		{Bearer: &BearerAuth{Keys: map[string]string{"ci": strings.Repeat("ab", 32)}}},
		{JWT: &JWTAuth{JWKSURL: "https://idp.test/jwks", Issuer: "https://idp.test/", Audience: []string{"app"}, Claims: map[string][]string{"groups": {"ops"}}, TimeoutMS: 5000}},
		{Forward: &ForwardAuth{URL: "https://auth.test/verify", CopyHeaders: []string{"Remote-User"}, TimeoutMS: 1000}},
		{OIDC: &OIDCAuth{AllowedDomains: []string{"example.com"}}},
	}
	for i, a := range good {
		ann := accessAnnouncement(a)
		if err := ann.Validate(); err != nil {
			t.Errorf("good block %d: Validate() = %v, want nil", i, err)
		}
	}
	long := strings.Repeat("x", maxAccessString+1)
	bad := []struct {
		name string
		a    *Access
		want string
	}{
		{"public with auth", &Access{Public: true, Bearer: &BearerAuth{Keys: map[string]string{"k": "d"}}}, "exclude each other"},
		{"too many allowed ips", &Access{AllowedIPs: many(maxAccessEntries+1, func(i int) string { return "10.0.0.1" })}, "allowed_ips has 1001 entries"},
		{"long denied ip", &Access{DeniedIPs: []string{long}}, "denied_ips entry is longer"},
		{"control character", &Access{AllowedIPs: []string{"10.0.0.1\n"}}, "not printable"},
		{"basic without users", &Access{Basic: &BasicAuth{}}, "basic users is empty"},
		{"too many users", &Access{Basic: &BasicAuth{Users: manyPairs(maxAccessEntries + 1)}}, "basic users has 1001 entries"},
		{"long hash", &Access{Basic: &BasicAuth{Users: map[string]string{"ann": long}}}, "basic users value"},
		{"bearer without keys", &Access{Bearer: &BearerAuth{}}, "bearer keys is empty"},
		{"jwt without issuer", &Access{JWT: &JWTAuth{JWKSURL: "https://idp.test/jwks", Audience: []string{"a"}}}, "jwks_url, issuer and audience"},
		{"jwt many audiences", &Access{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: many(maxAccessList+1, func(int) string { return "a" })}}, "jwt audience has 33"},
		{"jwt negative timeout", &Access{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, TimeoutMS: -1}}, "jwt timeout -1ms"},
		{"jwt huge leeway", &Access{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, LeewayMS: maxAccessMillis + 1}}, "jwt leeway"},
		{"forward without url", &Access{Forward: &ForwardAuth{}}, "forward needs url"},
		{"oidc many emails", &Access{OIDC: &OIDCAuth{AllowedEmails: many(maxAccessEntries+1, func(i int) string { return "a@b.c" })}}, "oidc allowed_emails has 1001"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			ann := accessAnnouncement(tt.a)
			err := ann.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "service 0: access:") {
				t.Fatalf("Validate() = %v, want it to name the service", err)
			}
		})
	}
}

// TestAccessErrorsBounded checks that a block with thousands of bad
// entries yields a short error, not one line per entry: the message goes
// back to the client and into the log.
func TestAccessErrorsBounded(t *testing.T) {
	a := &Access{AllowedIPs: many(maxAccessEntries, func(int) string { return "\x01" })}
	ann := accessAnnouncement(a)
	err := ann.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n > 9 {
		t.Fatalf("error has %d lines, want at most 9", n)
	}
}

// TestMalformedAccessDecoded checks that access blocks of the wrong JSON
// shape are decode errors, never a panic.
func TestMalformedAccessDecoded(t *testing.T) {
	for _, raw := range []string{
		`"open"`,
		`[1,2]`,
		`{"basic":{"users":["ann"]}}`,
		`{"bearer":{"keys":7}}`,
		`{"jwt":{"claims":{"groups":"ops"}}}`,
		`{"forward":{"timeout_ms":"5s"}}`,
		`{"allowed_ips":{"a":1}}`,
	} {
		body := `{"type":"hello","version":1,"announcement":{"name":"n","instance_id":"i","services":[{"id":"0","hostnames":["app.test"],"access":` + raw + `}]}}`
		if _, err := decodeMessage([]byte(body)); err == nil {
			t.Errorf("decodeMessage(access %s) = nil error, want a decode error", raw)
		}
	}
	// A good block survives the round trip.
	ann := accessAnnouncement(&Access{Basic: &BasicAuth{Realm: "r", Users: manyPairs(1)}, AllowedIPs: []string{"10.0.0.0/8"}})
	b, err := json.Marshal(&message{Type: msgHello, Version: Version, Announcement: &ann})
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Announcement.Services[0].Access
	if got == nil || got.Basic == nil || got.Basic.Realm != "r" || len(got.Basic.Users) != 1 || got.AllowedIPs[0] != "10.0.0.0/8" {
		t.Fatalf("decoded access = %+v, want the block sent", got)
	}
}

// TestOversizedAccessHelloRefused checks that the server refuses a hello
// whose access block is out of bounds with a reason naming it, and
// attaches nothing.
func TestOversizedAccessHelloRefused(t *testing.T) {
	reg := newFakeRegistry()
	srv, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, srv)
	ctrl, err := rc.mux.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	ann := accessAnnouncement(&Access{Basic: &BasicAuth{Users: manyPairs(maxAccessEntries + 1)}})
	if _, err := ctrl.Write(frame(t, &message{Type: msgHello, Version: Version, Announcement: &ann})); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(ctrl)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	if m.Type != msgRefused || !strings.Contains(m.Reason, "basic users has 1001 entries") {
		t.Fatalf("answer = %+v, want refused naming the basic users bound", m)
	}
	select {
	case s := <-reg.attached:
		t.Fatalf("registry attached session %s, want none", s.ID())
	default:
	}
}

func TestValidateServiceName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"web-1", true}, {"", true}, {strings.Repeat("a", 64), false}, {"a\x00b", false}} {
		a := &Announcement{Name: "n", InstanceID: "i", Services: []Service{{ID: "0", Name: tc.name, Hostnames: []string{"app.test"}}}}
		if err := a.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(name %q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestValidateVersion: the client's version is bounded and printable, and
// optional (older clients send none).
func TestValidateVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"", true}, {"v1.4.0", true}, {"v1.4.0-rc.1+linux.amd64", true}, {strings.Repeat("9", MaxVersionLen), true},
		{strings.Repeat("9", MaxVersionLen+1), false}, {"v1\x1b[31m", false}, {"v1\u202e", false}, {"v1\n", false},
	} {
		a := &Announcement{Name: "n", InstanceID: "i", Version: tc.version}
		if err := a.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(version %q) = %v, want ok %v", tc.version, err, tc.ok)
		}
	}
}
