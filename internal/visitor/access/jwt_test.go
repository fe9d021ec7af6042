package access

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

func testRSAKey(tb testing.TB) *rsa.PrivateKey {
	tb.Helper()
	rsaOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		rsaKey = k
	})
	return rsaKey
}

// signingKey is a private key with its kid and algorithm.
type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

func (k signingKey) public() jose.JSONWebKey {
	jwk := jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
	return jwk.Public()
}

func newEdKey(tb testing.TB, kid string) signingKey {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.EdDSA, priv: priv}
}

func newECKey(tb testing.TB, kid string) signingKey {
	tb.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return signingKey{kid: kid, alg: jose.ES256, priv: priv}
}

// sign returns a compact JWT of claims signed with k.
func sign(tb testing.TB, k signingKey, claims ...any) string {
	tb.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}}, opts)
	if err != nil {
		tb.Fatal(err)
	}
	b := jwt.Signed(s)
	for _, c := range claims {
		b = b.Claims(c)
	}
	tok, err := b.Serialize()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// jwksServer serves a key set that tests change, and counts fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	status  int
	fetches int
}

func newJWKSServer(tb testing.TB, keys ...signingKey) *jwksServer {
	tb.Helper()
	s := &jwksServer{status: http.StatusOK}
	s.setKeys(tb, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.fetches++
		status, body := s.status, s.body
		s.mu.Unlock()
		switch status {
		case http.StatusFound:
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case 0: // hang until the client gives up
			<-r.Context().Done()
		default:
			w.WriteHeader(status)
			w.Write(body)
		}
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setKeys(tb testing.TB, keys ...signingKey) {
	tb.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.public())
	}
	b, err := json.Marshal(set)
	if err != nil {
		tb.Fatal(err)
	}
	s.set(http.StatusOK, b)
}

func (s *jwksServer) set(status int, body []byte) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

func (s *jwksServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches
}

func newJWTMethod(tb testing.TB, srv *jwksServer, clk *fakeClock, edit func(*JWTConfig)) *JWT {
	tb.Helper()
	cfg := JWTConfig{
		JWKSURL:  srv.URL + "/jwks.json?secret=s3",
		Client:   srv.Client(),
		Issuer:   "https://idp.example.com",
		Audience: []string{"app"},
		Claims:   map[string][]string{"groups": {"ops", "dev"}},
		Now:      clk.Now,
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := NewJWT(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

type testClaims struct {
	jwt.Claims
	Groups any    `json:"groups,omitempty"`
	Email  string `json:"email,omitempty"`
}

func goodClaims(clk *fakeClock) testClaims {
	now := clk.Now()
	return testClaims{
		Claims: jwt.Claims{
			Issuer:   "https://idp.example.com",
			Audience: jwt.Audience{"other", "app"},
			Subject:  "ann",
			Expiry:   jwt.NewNumericDate(now.Add(time.Hour)),
			IssuedAt: jwt.NewNumericDate(now),
		},
		Groups: []string{"staff", "ops"},
		Email:  "ann@example.com",
	}
}

func bearer(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

func TestJWT(t *testing.T) {
	clk := newFakeClock()
	ed, ec := newEdKey(t, "ed1"), newECKey(t, "ec1")
	rs := signingKey{kid: "rs1", alg: jose.RS256, priv: testRSAKey(t)}
	stranger := newEdKey(t, "ed1") // same kid, other key
	srv := newJWKSServer(t, ed, ec, rs)
	m := newJWTMethod(t, srv, clk, nil)

	with := func(edit func(*testClaims)) testClaims {
		c := goodClaims(clk)
		edit(&c)
		return c
	}
	hmacConfusion := func() string {
		pub, err := json.Marshal(rs.public())
		if err != nil {
			t.Fatal(err)
		}
		return sign(t, signingKey{kid: "rs1", alg: jose.HS256, priv: pub}, goodClaims(clk))
	}()
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"ed1"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"https://idp.example.com","aud":"app","sub":"ann","exp":9999999999,"groups":"ops"}`)) + "."
	tests := []struct {
		name   string
		tok    string
		want   Outcome
		reason string
	}{
		{"EdDSA", sign(t, ed, goodClaims(clk)), Admit, `subject "ann"`},
		{"ES256", sign(t, ec, goodClaims(clk)), Admit, `subject "ann"`},
		{"RS256", sign(t, rs, goodClaims(clk)), Admit, `subject "ann"`},
		{"claim as a string", sign(t, ed, with(func(c *testClaims) { c.Groups = "dev" })), Admit, `subject "ann"`},
		{"nbf within leeway", sign(t, ed, with(func(c *testClaims) { c.NotBefore = jwt.NewNumericDate(clk.Now().Add(10 * time.Second)) })), Admit, `subject "ann"`},
		{"expired", sign(t, ed, with(func(c *testClaims) { c.Expiry = jwt.NewNumericDate(clk.Now().Add(-time.Minute)) })), Invalid, "token expired"},
		{"no exp", sign(t, ed, with(func(c *testClaims) { c.Expiry = nil })), Invalid, "token has no exp"},
		{"nbf ahead", sign(t, ed, with(func(c *testClaims) { c.NotBefore = jwt.NewNumericDate(clk.Now().Add(time.Hour)) })), Invalid, "token not valid yet (nbf)"},
		{"wrong issuer", sign(t, ed, with(func(c *testClaims) { c.Issuer = "https://evil.example.com" })), Invalid, "wrong issuer"},
		{"wrong audience", sign(t, ed, with(func(c *testClaims) { c.Audience = jwt.Audience{"other"} })), Invalid, "wrong audience"},
		{"claim missing", sign(t, ed, with(func(c *testClaims) { c.Groups = nil })), Invalid, `claim "groups" missing or not an accepted value`},
		{"claim not accepted", sign(t, ed, with(func(c *testClaims) { c.Groups = []string{"staff"} })), Invalid, `claim "groups" missing or not an accepted value`},
		{"claim of another type", sign(t, ed, with(func(c *testClaims) { c.Groups = 1 })), Invalid, `claim "groups" missing or not an accepted value`},
		{"no subject", sign(t, ed, with(func(c *testClaims) { c.Subject = "" })), Invalid, `claim "sub" is not printable text of 1 to 256 bytes`},
		{"hostile subject", sign(t, ed, with(func(c *testClaims) { c.Subject = "ann\r\nX-Aperio-User: root" })), Invalid, `claim "sub" is not printable text of 1 to 256 bytes`},
		{"signed by a stranger under a known kid", sign(t, stranger, goodClaims(clk)), Invalid, "signature does not verify"},
		{"HS256 with the public key as secret", hmacConfusion, Invalid, "malformed token or algorithm not accepted"},
		{"alg none", none, Invalid, "malformed token or algorithm not accepted"},
		{"garbage", "a.b.c", Invalid, "token is not canonical compact JWS"},
		{"signature respelled (trailing bits)", respellSignature(sign(t, ed, goodClaims(clk))), Invalid, "token is not canonical compact JWS"},
		{"garbage, canonical segments", "YQ.Yg.Yw", Invalid, "malformed token or algorithm not accepted"},
		{"huge", strings.Repeat("a", 9000), Invalid, "token longer than 8192 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := m.Check(bearer(tt.tok), visitor("/"))
			if got.Outcome != tt.want || got.Reason != tt.reason {
				t.Errorf("Check = %v %q, want %v %q", got.Outcome, got.Reason, tt.want, tt.reason)
			}
			if tt.want == Admit && got.User != "ann" {
				t.Errorf("User = %q, want ann", got.User)
			}
			if tt.want == Invalid && got.Challenge != `Bearer error="invalid_token"` {
				t.Errorf("Challenge = %q", got.Challenge)
			}
		})
	}
	if n := srv.count(); n != 1 {
		t.Errorf("key set fetched %d times for tokens of known kids, want 1", n)
	}
	if got := m.Check(httptest.NewRequest(http.MethodGet, "/", nil), visitor("/")); got.Outcome != Absent || got.Challenge != "Bearer" {
		t.Errorf("Check(no token) = %v %q, want absent with a Bearer challenge", got.Outcome, got.Challenge)
	}
}

func TestJWTSources(t *testing.T) {
	clk := newFakeClock()
	ed := newEdKey(t, "ed1")
	srv := newJWKSServer(t, ed)
	tok := sign(t, ed, goodClaims(clk))

	cookie := newJWTMethod(t, srv, clk, func(c *JWTConfig) { c.Cookie = "idp"; c.UserClaim = "email" })
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Cookie", "a=1; idp="+tok)
	if got := cookie.Check(r, visitor("/")); got.Outcome != Admit || got.User != "ann@example.com" {
		t.Errorf("cookie token = %v %q (%s), want admitted as ann@example.com", got.Outcome, got.User, got.Reason)
	}
	if h, c := cookie.Credentials(); len(h) != 1 || h[0] != "Authorization" || len(c) != 1 || c[0] != "idp" {
		t.Errorf("Credentials = %q, %q", h, c)
	}

	header := newJWTMethod(t, srv, clk, func(c *JWTConfig) { c.Header = "x-id-token" })
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Id-Token", tok)
	if got := header.Check(r, visitor("/")); got.Outcome != Admit {
		t.Errorf("header token = %v (%s), want admitted", got.Outcome, got.Reason)
	}
	if got := header.Check(bearer(tok), visitor("/")); got.Outcome != Absent {
		t.Errorf("Authorization with a custom header configured = %v, want absent", got.Outcome)
	}
}

func TestJWTRotation(t *testing.T) {
	clk := newFakeClock()
	old, next := newEdKey(t, "2026-11"), newEdKey(t, "2026-12")
	srv := newJWKSServer(t, old)
	m := newJWTMethod(t, srv, clk, nil)
	if got := m.Check(bearer(sign(t, old, goodClaims(clk))), visitor("/")); got.Outcome != Admit {
		t.Fatalf("old key = %v (%s)", got.Outcome, got.Reason)
	}
	// The issuer rotates: a token of the new kid makes one fetch.
	srv.setKeys(t, old, next)
	clk.Advance(DefaultJWKSRefresh)
	if got := m.Check(bearer(sign(t, next, goodClaims(clk))), visitor("/")); got.Outcome != Admit {
		t.Fatalf("new key after rotation = %v (%s), want admitted", got.Outcome, got.Reason)
	}
	if n := srv.count(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
	// Unknown kids fetch at most once per refresh interval.
	for i := range 5 {
		got := m.Check(bearer(sign(t, newEdKey(t, "bogus"), goodClaims(clk))), visitor("/"))
		if got.Outcome != Invalid || !strings.Contains(got.Reason, `no key for kid "bogus"`) {
			t.Fatalf("unknown kid %d = %v %q", i, got.Outcome, got.Reason)
		}
	}
	if n := srv.count(); n != 2 {
		t.Errorf("fetches after 5 unknown kids within the interval = %d, want 2", n)
	}
	clk.Advance(DefaultJWKSRefresh)
	m.Check(bearer(sign(t, newEdKey(t, "bogus"), goodClaims(clk))), visitor("/"))
	if n := srv.count(); n != 3 {
		t.Errorf("fetches after the interval = %d, want 3", n)
	}
	// The old key is dropped: once the set is fetched again, its tokens,
	// even one verified and remembered before, are refused.
	oldTok := sign(t, old, goodClaims(clk))
	if got := m.Check(bearer(oldTok), visitor("/")); got.Outcome != Admit {
		t.Fatalf("old key before it is dropped = %v", got.Outcome)
	}
	srv.setKeys(t, next)
	clk.Advance(DefaultJWKSCacheTTL)
	if got := m.Check(bearer(oldTok), visitor("/")); got.Outcome != Invalid {
		t.Errorf("token of a dropped key = %v (%s), want invalid", got.Outcome, got.Reason)
	}
}

func TestJWTFailsClosed(t *testing.T) {
	big := []byte(`{"keys":[` + strings.Repeat(" ", MaxJWKSBytes) + `]}`)
	hmacSet := []byte(`{"keys":[{"kty":"oct","kid":"ed1","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}]}`)
	tests := []struct {
		name   string
		status int
		body   []byte
		reason string
	}{
		{"server error", http.StatusInternalServerError, nil, "status 500"},
		{"redirect not followed", http.StatusFound, nil, "status 302"},
		{"not JSON", http.StatusOK, []byte("<html>"), "not a JSON key set"},
		{"too large", http.StatusOK, big, "larger than"},
		{"only an HMAC key", http.StatusOK, hmacSet, "no usable signing key"},
		{"too many keys", http.StatusOK, []byte(`{"keys":[` + strings.Repeat(`{},`, 100) + `{}]}`), "101 keys"},
		{"hangs past the timeout", 0, nil, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			ed := newEdKey(t, "ed1")
			srv := newJWKSServer(t, ed)
			srv.set(tt.status, tt.body)
			m := newJWTMethod(t, srv, clk, func(c *JWTConfig) { c.Timeout = 200 * time.Millisecond })
			got := m.Check(bearer(sign(t, ed, goodClaims(clk))), visitor("/"))
			if got.Outcome != Unavailable || !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Check = %v %q, want unavailable mentioning %q", got.Outcome, got.Reason, tt.reason)
			}
			if strings.Contains(got.Reason, "s3") {
				t.Errorf("Reason %q shows the URL's query", got.Reason)
			}
			// A failed fetch is not retried within the refresh interval.
			m.Check(bearer(sign(t, ed, goodClaims(clk))), visitor("/"))
			if n := srv.count(); n != 1 {
				t.Errorf("fetches = %d within the refresh interval, want 1", n)
			}
		})
	}
	t.Run("expired cache and an unreachable server", func(t *testing.T) {
		clk := newFakeClock()
		ed := newEdKey(t, "ed1")
		srv := newJWKSServer(t, ed)
		m := newJWTMethod(t, srv, clk, nil)
		tok := sign(t, ed, with1h(clk))
		if got := m.Check(bearer(tok), visitor("/")); got.Outcome != Admit {
			t.Fatalf("first = %v", got.Outcome)
		}
		srv.set(http.StatusServiceUnavailable, nil)
		clk.Advance(DefaultJWKSCacheTTL)
		if got := m.Check(bearer(tok), visitor("/")); got.Outcome != Unavailable {
			t.Errorf("after the TTL with the key server down = %v (%s), want unavailable, never admitted", got.Outcome, got.Reason)
		}
		g := newGate(t, Config{Methods: []Method{m}})
		if d := g.Check(bearer(tok), visitor("/")); d.Admitted || d.Status != http.StatusServiceUnavailable {
			t.Errorf("gate = %+v, want 503", d)
		}
	})
}

// with1h returns good claims valid for two hours, past the key set's TTL.
func with1h(clk *fakeClock) testClaims {
	c := goodClaims(clk)
	c.Expiry = jwt.NewNumericDate(clk.Now().Add(2 * time.Hour))
	return c
}

func TestParseKeySetFilters(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ed := newEdKey(t, "ok")
	enc := ed.public()
	enc.KeyID, enc.Use = "enc", "enc"
	private := jose.JSONWebKey{Key: ed.priv, KeyID: "private", Algorithm: "EdDSA"}
	keys := []jose.JSONWebKey{
		ed.public(),
		{Key: &weak.PublicKey, KeyID: "weak", Algorithm: "RS256"},
		{Key: &p384.PublicKey, KeyID: "p384"},
		enc,
		private,
	}
	body, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), `"keys":[`, `"keys":[{"kty":"ML-KEM","kid":"unknown"},`, 1))
	set, err := parseKeySet(body, jwtAlgorithms)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range set.all {
		got = append(got, k.KeyID)
		if !k.IsPublic() {
			t.Errorf("key %s kept its private half", k.KeyID)
		}
	}
	if strings.Join(got, ",") != "ok,private" {
		t.Errorf("kept keys %q, want ok and the public half of private", got)
	}
	if _, err := parseKeySet(body, []jose.SignatureAlgorithm{jose.RS256}); err == nil {
		t.Error("parseKeySet with only RS256 accepted and no usable RSA key = nil error")
	}
}

func TestNewJWTRefuses(t *testing.T) {
	ok := JWTConfig{JWKSURL: "https://idp.example.com/jwks", Client: &http.Client{}, Issuer: "i", Audience: []string{"a"}}
	if _, err := NewJWT(ok); err != nil {
		t.Fatalf("NewJWT(ok) = %v", err)
	}
	tests := []struct {
		name string
		edit func(*JWTConfig)
		want string
	}{
		{"no client", func(c *JWTConfig) { c.Client = nil }, "outbound client"},
		{"relative url", func(c *JWTConfig) { c.JWKSURL = "/jwks" }, "jwks_url"},
		{"file url", func(c *JWTConfig) { c.JWKSURL = "file:///etc/passwd" }, "jwks_url"},
		{"no issuer", func(c *JWTConfig) { c.Issuer = "" }, "issuer"},
		{"no audience", func(c *JWTConfig) { c.Audience = nil }, "audience"},
		{"HS256", func(c *JWTConfig) { c.Algorithms = []string{"HS256"} }, `"HS256"`},
		{"none", func(c *JWTConfig) { c.Algorithms = []string{"none"} }, `"none"`},
		{"leeway", func(c *JWTConfig) { c.Leeway = time.Hour }, "leeway"},
		{"refresh", func(c *JWTConfig) { c.RefreshInterval = time.Millisecond }, "refresh"},
		{"timeout", func(c *JWTConfig) { c.Timeout = time.Hour }, "timeout"},
		{"empty claim values", func(c *JWTConfig) { c.Claims = map[string][]string{"g": nil} }, `claim "g"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			_, err := NewJWT(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewJWT = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestJWTOneFetchForConcurrentTokens(t *testing.T) {
	clk := newFakeClock()
	ed := newEdKey(t, "ed1")
	srv := newJWKSServer(t, ed)
	m := newJWTMethod(t, srv, clk, nil)
	const n = 16
	toks := make([]string, n)
	for i := range toks {
		c := goodClaims(clk)
		c.ID = string(rune('a' + i)) // distinct tokens: none comes from the token cache
		toks[i] = sign(t, ed, c)
	}
	results := make(chan Result, n)
	var wg sync.WaitGroup
	for _, tok := range toks {
		wg.Go(func() { results <- m.Check(bearer(tok), visitor("/")) })
	}
	wg.Wait()
	close(results)
	for res := range results {
		if res.Outcome != Admit {
			t.Errorf("concurrent check = %v (%s), want admit", res.Outcome, res.Reason)
		}
	}
	if got := srv.count(); got != 1 {
		t.Errorf("key set fetched %d times by %d concurrent first tokens, want 1", got, n)
	}
}

// respellSignature returns tok with its signature's unused trailing bits
// set: go-jose's decoder reads the same signature.
func respellSignature(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	return tok[:i+1] + b64.RespellingsForTest(tok[i+1:])[2]
}
