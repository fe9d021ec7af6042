package access

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkGate measures a gate's cost per request on the hot path: after
// the first check, with the hash verification, the key set or the token
// already remembered. Run: go test -run XXX -bench Gate ./internal/visitor/access/
func BenchmarkGate(b *testing.B) {
	a, _ := testHashes(b)
	basic, err := NewBasic(BasicConfig{Users: map[string]string{"ann": a}})
	if err != nil {
		b.Fatal(err)
	}
	const key = "ci-key-0123456789abcdef0123456789abcdef"
	bearerM, err := NewBearer(BearerConfig{Keys: map[string]string{"ci": digest(key), "deploy": digest(key + "x"), "ops": digest(key + "y")}})
	if err != nil {
		b.Fatal(err)
	}
	clk := newFakeClock()
	ed := newEdKey(b, "ed1")
	srv := newJWKSServer(b, ed)
	jwtM := newJWTMethod(b, srv, clk, nil)
	tok := sign(b, ed, goodClaims(clk))
	ring := newKeyring(b, clk, "k1", "k1")
	share, _, err := ring.Mint("app.example.com", "/", time.Hour)
	if err != nil {
		b.Fatal(err)
	}

	cases := []struct {
		name string
		cfg  Config
		req  *http.Request
	}{
		{"open", Config{}, httptest.NewRequest(http.MethodGet, "/", nil)},
		{"basic-cached", Config{Methods: []Method{basic}}, newRequest(b, "/", "Authorization", basicAuth("ann", "argon-pw"))},
		{"bearer", Config{Methods: []Method{bearerM}}, newRequest(b, "/", "Authorization", "Bearer "+key)},
		{"jwt-cached-jwks", Config{Methods: []Method{jwtM}}, bearer(tok)},
		{"share-cookie", Config{Default: Deny, Shares: ring}, newRequest(b, "/", "Cookie", "theme=dark; aperio_share="+share+"; other=1")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			g := newGate(b, c.cfg)
			v := visitor("/")
			if d := g.Check(c.req, v); !d.Admitted {
				b.Fatalf("first check refused: %s", d.Reason)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d := g.Check(c.req, v); !d.Admitted {
					b.Fatalf("refused: %s", d.Reason)
				}
			}
		})
	}
	// The token's signature checked on every request, as it is once per
	// token: what the token cache saves.
	b.Run("jwt-verify-uncached", func(b *testing.B) {
		r := bearer(tok)
		b.ReportAllocs()
		for b.Loop() {
			jwtM.tokens.purge()
			if res := jwtM.Check(r, visitor("/")); res.Outcome != Admit {
				b.Fatalf("refused: %s", res.Reason)
			}
		}
	})
}

// BenchmarkGatePrepareUpstream measures readying the backend request
// after an admission, with and without an identity token to sign.
func BenchmarkGatePrepareUpstream(b *testing.B) {
	signer, err := NewSigner(SignerConfig{Issuer: "https://aperio.example.com"})
	if err != nil {
		b.Fatal(err)
	}
	basic := &fakeMethod{name: "basic", headers: []string{"Authorization"}}
	d := Decision{Admitted: true, User: "ann", Method: "basic"}
	for _, c := range []struct {
		name     string
		identity *Signer
	}{{"headers", nil}, {"identity-jwt", signer}} {
		b.Run(c.name, func(b *testing.B) {
			g := newGate(b, Config{Methods: []Method{basic}, Identity: c.identity})
			b.ReportAllocs()
			for b.Loop() {
				h := http.Header{"Authorization": {"Basic x"}, "Cookie": {"a=1; aperio_session=s"}, "Accept": {"*/*"}}
				if err := g.PrepareUpstream(h, visitor("/"), d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
