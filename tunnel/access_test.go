package tunnel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
		{Auth: Auth{Basic: &BasicAuth{Realm: "staff", Users: manyPairs(3)}}, IdentityJWT: true},
		{Auth: Auth{Bearer: &BearerAuth{Keys: map[string]string{"ci": strings.Repeat("ab", 32)}}}},
		{Auth: Auth{JWT: &JWTAuth{JWKSURL: "https://idp.test/jwks", Issuer: "https://idp.test/", Audience: []string{"app"}, Claims: map[string][]string{"groups": {"ops"}}, Timeout: 5 * time.Second}}},
		{Auth: Auth{Forward: &ForwardAuth{URL: "https://auth.test/verify", CopyHeaders: []string{"Remote-User"}, Timeout: time.Second}}},
		{Auth: Auth{OIDC: &OIDCAuth{AllowedDomains: []string{"example.com"}}}},
	}
	for i, a := range good {
		ann := accessAnnouncement(a)
		if err := ann.Validate(); err != nil {
			t.Errorf("good block %d: Validate() = %v, want nil", i, err)
		}
	}
	long := strings.Repeat("x", MaxAccessString+1)
	bad := []struct {
		name string
		a    *Access
		want string
	}{
		{"public with auth", &Access{Public: true, Auth: Auth{Bearer: &BearerAuth{Keys: map[string]string{"k": "d"}}}}, "public: cannot be combined with auth"},
		{"too many allowed ips", &Access{AllowedIPs: many(MaxAccessEntries+1, func(i int) string { return "10.0.0.1" })}, "allowed_ips: 1001 entries, at most 1000"},
		{"long denied ip", &Access{DeniedIPs: []string{long}}, "denied_ips: entry 0 is longer"},
		{"control character", &Access{AllowedIPs: []string{"10.0.0.1\n"}}, "not printable"},
		{"basic without users", &Access{Auth: Auth{Basic: &BasicAuth{}}}, "auth.basic.users: required"},
		{"too many users", &Access{Auth: Auth{Basic: &BasicAuth{Users: manyPairs(MaxAccessEntries + 1)}}}, "auth.basic.users: 1001 users, at most 1000"},
		{"long hash", &Access{Auth: Auth{Basic: &BasicAuth{Users: map[string]string{"ann": long}}}}, `auth.basic.users: user "ann": the value is longer`},
		{"bearer without keys", &Access{Auth: Auth{Bearer: &BearerAuth{}}}, "auth.bearer.keys: required"},
		{"jwt without issuer", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "https://idp.test/jwks", Audience: []string{"a"}}}}, "auth.jwt.issuer: required"},
		{"jwt many audiences", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: many(MaxAccessList+1, func(int) string { return "a" })}}}, "auth.jwt.audience: 33 entries, at most 32"},
		{"jwt negative timeout", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, Timeout: -time.Millisecond}}}, "auth.jwt.timeout: -1ms is outside [0, 30s]"},
		{"jwt huge leeway", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, Leeway: MaxJWTLeeway + time.Second}}}, "auth.jwt.leeway: 5m1s is outside [0, 5m]"},
		{"forward without url", &Access{Auth: Auth{Forward: &ForwardAuth{}}}, "auth.forward.url: required"},
		{"oidc many emails", &Access{Auth: Auth{OIDC: &OIDCAuth{AllowedEmails: many(MaxOIDCEntries+1, func(i int) string { return "a@b.c" })}}}, "auth.oidc.allowed_emails: 257 entries, at most 256"},
		// The server's gate refuses these; the announcement check now
		// does too, and with it the client's loader.
		{"long realm", &Access{Auth: Auth{Basic: &BasicAuth{Realm: strings.Repeat("r", MaxRealm+1), Users: manyPairs(1)}}}, "auth.basic.realm: longer than 128 bytes"},
		{"user with colon", &Access{Auth: Auth{Basic: &BasicAuth{Users: map[string]string{"a:b": "h"}}}}, `auth.basic.users: user "a:b": a name is 1 to 256 printable bytes without ':'`},
		{"long key name", &Access{Auth: Auth{Bearer: &BearerAuth{Keys: map[string]string{strings.Repeat("k", MaxAccessName+1): "d"}}}}, "auth.bearer.keys: key"},
		{"claim value not printable", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, Claims: map[string][]string{"groups": {"ops", "a\u202eb"}}}}}, `auth.jwt.claims: claim "groups": value 1`},
		{"jwt timeout above the gate's", &Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i", Audience: []string{"a"}, Timeout: time.Minute}}}, "auth.jwt.timeout: 1m is outside [0, 30s]"},
		{"forward cache_ttl", &Access{Auth: Auth{Forward: &ForwardAuth{URL: "u", CacheTTL: 6 * time.Minute}}}, "auth.forward.cache_ttl: 6m is outside [0, 5m]"},
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
	a := &Access{AllowedIPs: many(MaxAccessEntries, func(int) string { return "\x01" })}
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
	ann := accessAnnouncement(&Access{Auth: Auth{Basic: &BasicAuth{Realm: "r", Users: manyPairs(1)}}, AllowedIPs: []string{"10.0.0.0/8"}})
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
	ann := accessAnnouncement(&Access{Auth: Auth{Basic: &BasicAuth{Users: manyPairs(MaxAccessEntries + 1)}}})
	if _, err := ctrl.Write(frame(t, &message{Type: msgHello, Version: Version, Announcement: &ann})); err != nil {
		t.Fatal(err)
	}
	m, err := readMessage(ctrl)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	if m.Type != msgRefused || !strings.Contains(m.Reason, "auth.basic.users: 1001 users, at most 1000") {
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

// accessWireJSON is an access block with every field set, in the wire
// format every release has spoken: durations as whole milliseconds under
// *_ms keys, the methods beside the IP rules.
const accessWireJSON = `{"allowed_ips":["10.0.0.0/8"],"denied_ips":["10.9.0.0/16"],"identity_jwt":true,` +
	`"basic":{"realm":"staff","users":{"ann":"$2b$h"}},"bearer":{"keys":{"ci":"ab"}},` +
	`"jwt":{"jwks_url":"https://idp.test/jwks","issuer":"https://idp.test/","audience":["app"],"claims":{"groups":["ops"]},"header":"X-Token","cookie":"tok","algorithms":["ES256"],"user_claim":"email","leeway_ms":30000,"cache_ttl_ms":3600000,"refresh_interval_ms":30000,"timeout_ms":5000},` +
	`"forward":{"url":"https://auth.test/verify","copy_headers":["Remote-User"],"user_header":"Remote-User","timeout_ms":2000,"cache_ttl_ms":60000},` +
	`"oidc":{"allowed_emails":["a@example.com"],"allowed_domains":["example.com"],"groups":["ops"]}}`

// accessWireValue is accessWireJSON as an Access.
var accessWireValue = Access{
	AllowedIPs: []string{"10.0.0.0/8"}, DeniedIPs: []string{"10.9.0.0/16"}, IdentityJWT: true,
	Auth: Auth{
		Basic:  &BasicAuth{Realm: "staff", Users: map[string]string{"ann": "$2b$h"}},
		Bearer: &BearerAuth{Keys: map[string]string{"ci": "ab"}},
		JWT: &JWTAuth{JWKSURL: "https://idp.test/jwks", Issuer: "https://idp.test/", Audience: []string{"app"},
			Claims: map[string][]string{"groups": {"ops"}}, Header: "X-Token", Cookie: "tok", Algorithms: []string{"ES256"}, UserClaim: "email",
			Leeway: 30 * time.Second, CacheTTL: time.Hour, RefreshInterval: 30 * time.Second, Timeout: 5 * time.Second},
		Forward: &ForwardAuth{URL: "https://auth.test/verify", CopyHeaders: []string{"Remote-User"}, UserHeader: "Remote-User",
			Timeout: 2 * time.Second, CacheTTL: time.Minute},
		OIDC: &OIDCAuth{AllowedEmails: []string{"a@example.com"}, AllowedDomains: []string{"example.com"}, Groups: []string{"ops"}},
	},
}

// TestAccessWireFormat pins the bytes of an access block both ways, so
// that a client and a server of different releases read each other.
func TestAccessWireFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    Access
		json string
	}{
		{"every field", accessWireValue, accessWireJSON},
		{"public", Access{Public: true}, `{"public":true}`},
		{"bare jwt", Access{Auth: Auth{JWT: &JWTAuth{JWKSURL: "u", Issuer: "i"}}}, `{"jwt":{"jwks_url":"u","issuer":"i","audience":null}}`},
		{"bare forward", Access{Auth: Auth{Forward: &ForwardAuth{URL: "u"}}}, `{"forward":{"url":"u"}}`},
		{"bare basic and bearer", Access{Auth: Auth{Basic: &BasicAuth{}, Bearer: &BearerAuth{}}}, `{"basic":{"users":null},"bearer":{"keys":null}}`},
		{"negative durations", Access{Auth: Auth{Forward: &ForwardAuth{URL: "u", Timeout: -time.Second, CacheTTL: -2 * time.Millisecond}}}, `{"forward":{"url":"u","timeout_ms":-1000,"cache_ttl_ms":-2}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.a)
			if err != nil || string(b) != tc.json {
				t.Errorf("json.Marshal(%+v) =\n%s, %v\nwant\n%s", tc.a, b, err, tc.json)
			}
			var got Access
			if err := json.Unmarshal([]byte(tc.json), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.a, got); diff != "" {
				t.Errorf("json.Unmarshal(%s) differs (-want +got):\n%s", tc.json, diff)
			}
		})
	}

	// Inside a frame, behind the service's pointer, as a hello carries it.
	var buf bytes.Buffer
	ann := accessAnnouncement(&accessWireValue)
	if err := writeMessage(&buf, &message{Type: msgHello, Version: Version, Announcement: &ann}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"access":`+accessWireJSON)) {
		t.Errorf("hello frame %s does not carry %s", buf.Bytes()[4:], accessWireJSON)
	}
	m, err := readMessage(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&accessWireValue, m.Announcement.Services[0].Access); diff != "" {
		t.Errorf("decoded hello access differs (-want +got):\n%s", diff)
	}

	// The wire keeps whole milliseconds: a finer part is dropped, as the
	// client always did.
	fine := JWTAuth{Leeway: 1500 * time.Microsecond, Timeout: time.Second + time.Nanosecond}
	const fineJSON = `{"jwks_url":"","issuer":"","audience":null,"leeway_ms":1,"timeout_ms":1000}`
	if b, err := json.Marshal(fine); err != nil || string(b) != fineJSON {
		t.Errorf("json.Marshal(%+v) = %s, %v, want %s", fine, b, err, fineJSON)
	}
}

// TestAccessWireRange: a count of milliseconds that has no Duration is
// refused with an error that names the key, never wrapped around into
// another value, and a hello that carries one is refused as malformed.
func TestAccessWireRange(t *testing.T) {
	const limit = math.MaxInt64 / int64(time.Millisecond)
	for _, tc := range []struct{ method, key string }{
		{"jwt", "leeway_ms"}, {"jwt", "cache_ttl_ms"}, {"jwt", "refresh_interval_ms"}, {"jwt", "timeout_ms"},
		{"forward", "timeout_ms"}, {"forward", "cache_ttl_ms"},
	} {
		block := func(ms int64) string {
			return `{"` + tc.method + `":{"url":"u","jwks_url":"u","` + tc.key + `":` + strconv.FormatInt(ms, 10) + `}}`
		}
		for _, ms := range []int64{limit + 1, -limit - 1, math.MaxInt64, math.MinInt64} {
			var a Access
			err := json.Unmarshal([]byte(block(ms)), &a)
			if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "out of range") {
				t.Errorf("json.Unmarshal(%s) = %v, want an out of range error naming %s", block(ms), err, tc.key)
			}
		}
		for _, ms := range []int64{limit, -limit, -1, 0} {
			var a Access
			if err := json.Unmarshal([]byte(block(ms)), &a); err != nil {
				t.Errorf("json.Unmarshal(%s) = %v, want nil", block(ms), err)
				continue
			}
			b, err := json.Marshal(a)
			if err != nil || (ms != 0 && !strings.Contains(string(b), `"`+tc.key+`":`+strconv.FormatInt(ms, 10))) {
				t.Errorf("json.Marshal(json.Unmarshal(%s)) = %s, %v, want %s kept", block(ms), b, err, tc.key)
			}
		}
		hello := `{"type":"hello","version":1,"announcement":{"name":"n","instance_id":"i","services":[{"id":"0","hostnames":["app.test"],"access":` + block(math.MaxInt64) + `}]}}`
		if _, err := decodeMessage([]byte(hello)); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("decodeMessage(hello with %s %s MaxInt64) = %v, want an error naming it", tc.method, tc.key, err)
		}
	}
}

// TestAccessProblemsBounded: a hostile block, every list full of bad
// entries, yields one problem per key, each message at most 1 KiB
// whatever the length of what it quotes.
func TestAccessProblemsBounded(t *testing.T) {
	bad := func(n int) []string {
		return many(n, func(i int) string { return strings.Repeat("\x01", MaxAccessString) })
	}
	users := make(map[string]string, MaxAccessEntries)
	for i := range MaxAccessEntries {
		users[fmt.Sprintf("%d:%s", i, strings.Repeat("\x1b", MaxAccessName))] = strings.Repeat("\x00", MaxAccessString)
	}
	claims := make(map[string][]string, MaxAccessList)
	for i := range MaxAccessList {
		claims[fmt.Sprintf("c%d\x01", i)] = bad(MaxAccessList)
	}
	a := &Access{AllowedIPs: bad(MaxAccessEntries), DeniedIPs: bad(MaxAccessEntries), Auth: Auth{
		Basic:   &BasicAuth{Realm: strings.Repeat("\x01", MaxAccessString), Users: users},
		Bearer:  &BearerAuth{Keys: users},
		JWT:     &JWTAuth{JWKSURL: "\x01", Issuer: "\x01", Audience: bad(MaxAccessList), Claims: claims, Algorithms: bad(MaxAccessList), Leeway: -1},
		Forward: &ForwardAuth{URL: "\x01", CopyHeaders: bad(MaxAccessList), Timeout: math.MaxInt64},
		OIDC:    &OIDCAuth{AllowedEmails: bad(MaxOIDCEntries), AllowedDomains: bad(MaxOIDCEntries), Groups: bad(MaxOIDCEntries)},
	}}
	ps := a.Problems()
	if len(ps) == 0 || len(ps) > 30 {
		t.Fatalf("Problems() = %d problems, want 1 to 30", len(ps))
	}
	for _, p := range ps {
		if len(p.Field)+len(p.Msg) > 1024 {
			t.Errorf("problem %s: %s is %d bytes, want at most 1 KiB", p.Field, p.Msg, len(p.Field)+len(p.Msg))
		}
	}
	if ps := (*Access)(nil).Problems(); ps != nil {
		t.Errorf("nil Problems() = %v, want nil", ps)
	}
}

// FuzzAccessJSON decodes arbitrary bytes as an access block: it never
// panics, Problems never panics on what it decoded, and a block it
// accepts encodes to bytes that decode and encode to the same bytes.
func FuzzAccessJSON(f *testing.F) {
	f.Add([]byte(accessWireJSON))
	f.Add([]byte(`{"jwt":{"leeway_ms":9223372036855,"claims":{"":[]}}}`))
	f.Add([]byte(`{"forward":{"timeout_ms":-9223372036854,"cache_ttl_ms":1e3}}`))
	f.Add([]byte(`{"public":true,"basic":{"users":{"a:b":"\u0000"}},"oidc":{}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Access
		if err := json.Unmarshal(b, &a); err != nil {
			return
		}
		a.Problems()
		enc, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("json.Marshal(%+v) = %v", a, err)
		}
		var again Access
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("json.Unmarshal(%s) = %v, want nil", enc, err)
		}
		if enc2, err := json.Marshal(again); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("re-encoding %s = %s, %v, want the same bytes", enc, enc2, err)
		}
	})
}
