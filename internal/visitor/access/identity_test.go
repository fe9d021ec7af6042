package access

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestSignerVerifiesWithPublishedJWKS(t *testing.T) {
	clk := newFakeClock()
	s, err := NewSigner(SignerConfig{Issuer: "https://aperio.example.com", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign("app.example.com", "ann", "basic")
	if err != nil {
		t.Fatal(err)
	}
	// A backend knows only the published document.
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(s.JWKS(), &set); err != nil {
		t.Fatalf("JWKS is not a key set: %v", err)
	}
	if len(set.Keys) != 1 || set.Keys[0].KeyID != s.KeyID() || set.Keys[0].Algorithm != "EdDSA" || !set.Keys[0].IsPublic() {
		t.Fatalf("JWKS keys = %+v, want one public EdDSA key with kid %s", set.Keys, s.KeyID())
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Headers[0].KeyID != s.KeyID() {
		t.Errorf("token kid = %q, want %q", parsed.Headers[0].KeyID, s.KeyID())
	}
	var c jwt.Claims
	var extra struct {
		Auth string `json:"aperio_auth"`
	}
	if err := parsed.Claims(&set, &c, &extra); err != nil {
		t.Fatalf("verify with the published JWKS: %v", err)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: "https://aperio.example.com", AnyAudience: jwt.Audience{"app.example.com"}, Time: clk.Now()}, 0); err != nil {
		t.Errorf("claims: %v", err)
	}
	if c.Subject != "ann" || extra.Auth != "basic" || c.Expiry.Time().Sub(clk.Now()) != IdentityTTL {
		t.Errorf("claims = sub %q auth %q exp %v, want ann, basic, now+60s", c.Subject, extra.Auth, c.Expiry.Time())
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: "https://aperio.example.com", AnyAudience: jwt.Audience{"other.example.com"}, Time: clk.Now()}, 0); err == nil {
		t.Error("a token for app.example.com validates for other.example.com")
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Time: clk.Now().Add(IdentityTTL + time.Second)}, 0); err == nil {
		t.Error("a token validates after its 60 s")
	}
	// Another signer's key set does not verify it.
	s2, err := NewSigner(SignerConfig{Issuer: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var set2 jose.JSONWebKeySet
	if err := json.Unmarshal(s2.JWKS(), &set2); err != nil {
		t.Fatal(err)
	}
	if err := parsed.Claims(&set2, &c); err == nil {
		t.Error("token verified with another server's key set")
	}
}

func TestLoadSignerKey(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadSignerKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil || !got.Equal(priv) {
		t.Fatalf("LoadSignerKey = %v, %v; want the key back", got, err)
	}
	a, err := NewSigner(SignerConfig{Issuer: "x", Key: got})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSigner(SignerConfig{Issuer: "x", Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	if a.KeyID() != b.KeyID() {
		t.Errorf("one key, two kids: %s, %s", a.KeyID(), b.KeyID())
	}
	for name, in := range map[string][]byte{
		"empty":      nil,
		"not pem":    []byte("hello"),
		"wrong type": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
		"garbage":    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
	} {
		if _, err := LoadSignerKey(in); err == nil {
			t.Errorf("LoadSignerKey(%s) = nil error", name)
		}
	}
	if _, err := NewSigner(SignerConfig{}); err == nil {
		t.Error("NewSigner without issuer = nil error")
	}
	if _, err := NewSigner(SignerConfig{Issuer: "x", Key: priv[:10]}); err == nil {
		t.Error("NewSigner with a short key = nil error")
	}
}

func TestSignerReusesRecentTokens(t *testing.T) {
	clk := newFakeClock()
	s, err := NewSigner(SignerConfig{Issuer: "https://aperio.example.com", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	mustSign := func(host, user, method string) string {
		t.Helper()
		tok, err := s.Sign(host, user, method)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first := mustSign("app.example.com", "ann", "basic")
	clk.Advance(identityReuse - time.Second)
	if again := mustSign("app.example.com", "ann", "basic"); again != first {
		t.Error("a token signed 29 s ago was not reused")
	}
	for _, other := range [][3]string{{"b.example.com", "ann", "basic"}, {"app.example.com", "bob", "basic"}, {"app.example.com", "ann", "jwt"}} {
		if tok := mustSign(other[0], other[1], other[2]); tok == first {
			t.Errorf("Sign(%q) reused the token of app.example.com/ann/basic", other)
		}
	}
	clk.Advance(time.Second)
	if again := mustSign("app.example.com", "ann", "basic"); again == first {
		t.Error("a token signed 30 s ago was reused: the backend would get one with under 30 s left")
	}
}

// TestSignerSetKeys: after SetKeys the new key signs (not a token kept
// from before), JWKS publishes it and the previous one, so a token of the
// previous key still verifies; a bad key changes nothing.
func TestSignerSetKeys(t *testing.T) {
	_, k1, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, k2, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(SignerConfig{Issuer: "aperio", Key: k1})
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Sign("app.example.com", "ann", "basic")
	if err != nil {
		t.Fatal(err)
	}
	kid1 := s.KeyID()
	if err := s.SetKeys(k2, k1); err != nil {
		t.Fatalf("SetKeys() = %v", err)
	}
	if s.KeyID() == kid1 {
		t.Fatalf("KeyID() after SetKeys = %s, the old key's", kid1)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(s.JWKS(), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].KeyID != s.KeyID() || set.Keys[1].KeyID != kid1 {
		t.Fatalf("JWKS kids = %v, want [%s %s]", set.Keys, s.KeyID(), kid1)
	}
	fresh, err := s.Sign("app.example.com", "ann", "basic")
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"previous key's": old, "current key's": fresh} {
		parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.EdDSA})
		if err != nil {
			t.Fatal(err)
		}
		var c jwt.Claims
		if err := parsed.Claims(&set, &c); err != nil {
			t.Errorf("%s token does not verify with the published set: %v", name, err)
		}
		if name == "current key's" && parsed.Headers[0].KeyID != s.KeyID() {
			t.Errorf("token signed after SetKeys has kid %s, want %s", parsed.Headers[0].KeyID, s.KeyID())
		}
	}
	if err := s.SetKeys(ed25519.PrivateKey("short"), nil); err == nil {
		t.Error("SetKeys(short key) = nil, want an error")
	}
	if got := s.JWKS(); len(got) == 0 || s.KeyID() == kid1 {
		t.Error("a refused SetKeys changed the signer")
	}
}
