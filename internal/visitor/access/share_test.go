package access

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"
)

func newKeyring(tb testing.TB, clk *fakeClock, current string, ids ...string) *Keyring {
	tb.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = []byte(strings.Repeat(id, 32)[:32])
	}
	k, err := NewKeyring(KeyringConfig{Keys: keys, Current: current, Now: clk.Now})
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func mint(tb testing.TB, k *Keyring, host, path string, ttl time.Duration) string {
	tb.Helper()
	tok, _, err := k.Mint(host, path, ttl)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func TestShareVerify(t *testing.T) {
	clk := newFakeClock()
	k1 := newKeyring(t, clk, "k1", "k1")
	tok := mint(t, k1, "App.Example.com", "/docs", time.Hour)
	link, err := k1.Verify(tok)
	if err != nil {
		t.Fatalf("Verify(minted) = %v", err)
	}
	if link.Host != "app.example.com" || link.Path != "/docs" || !link.Expires.Equal(clk.Now().Add(time.Hour)) || link.Nonce == "" {
		t.Errorf("Verify = %+v", link)
	}

	// Rotation: k2 signs, k1 still verifies; dropping k1 revokes its links.
	rotated := newKeyring(t, clk, "k2", "k1", "k2")
	if _, err := rotated.Verify(tok); err != nil {
		t.Errorf("Verify(old key's link) after rotation = %v, want valid", err)
	}
	tok2 := mint(t, rotated, "app.example.com", "", time.Hour)
	if !strings.HasPrefix(tok2, "v1.k2.") {
		t.Errorf("rotated keyring signs %q, want the current key k2", tok2)
	}
	dropped := newKeyring(t, clk, "k2", "k2")
	if _, err := dropped.Verify(tok); !errors.Is(err, ErrShareKey) {
		t.Errorf("Verify(link of a dropped key) = %v, want ErrShareKey", err)
	}

	parts := strings.Split(tok, ".")
	otherPayload := strings.Split(mint(t, k1, "evil.example.com", "/", time.Hour), ".")[2]
	hostile := []struct {
		name string
		tok  string
		want error
	}{
		{"empty", "", ErrShareMalformed},
		{"three parts", strings.Join(parts[:3], "."), ErrShareMalformed},
		{"five parts", tok + ".x", ErrShareMalformed},
		{"version", "v2." + strings.Join(parts[1:], "."), ErrShareMalformed},
		{"unknown key", "v1.zz." + parts[2] + "." + parts[3], ErrShareKey},
		{"payload swapped", "v1.k1." + otherPayload + "." + parts[3], ErrShareSignature},
		{"mac flipped", tok[:len(tok)-2] + flip(tok[len(tok)-2:]), ErrShareSignature},
		{"mac not base64", strings.Join(parts[:3], ".") + ".!!", ErrShareMalformed},
		{"huge", tok + strings.Repeat("A", 3000), ErrShareMalformed},
	}
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := k1.Verify(tt.tok); !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v, want %v", err, tt.want)
			}
		})
	}

	clk.Advance(time.Hour)
	if _, err := k1.Verify(tok); !errors.Is(err, ErrShareExpired) {
		t.Errorf("Verify at expiry = %v, want ErrShareExpired", err)
	}
}

func flip(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}

func TestShareMintRefuses(t *testing.T) {
	k := newKeyring(t, newFakeClock(), "k1", "k1")
	tests := []struct {
		host, path string
		ttl        time.Duration
	}{
		{"*.example.com", "/", time.Hour},
		{"", "/", time.Hour},
		{"bad host!", "/", time.Hour},
		{"app.example.com", "docs", time.Hour},
		{"app.example.com", "/a/../b", time.Hour},
		{"app.example.com", "/a//b", time.Hour},
		{"app.example.com", "/docs;x", time.Hour},
		{"app.example.com", "/a?x=1", time.Hour},
		{"app.example.com", "/" + strings.Repeat("a", 2000), time.Hour},
		{"app.example.com", "/", 0},
		{"app.example.com", "/", MaxShareTTL + time.Second},
	}
	for _, tt := range tests {
		if tok, _, err := k.Mint(tt.host, tt.path, tt.ttl); err == nil {
			t.Errorf("Mint(%q, %q, %s) = %q, want an error", tt.host, tt.path, tt.ttl, tok)
		}
	}
}

func TestNewKeyringRefuses(t *testing.T) {
	long := []byte(strings.Repeat("k", 32))
	for name, cfg := range map[string]KeyringConfig{
		"no keys":      {Current: "a"},
		"short key":    {Keys: map[string][]byte{"a": []byte("short")}, Current: "a"},
		"bad id":       {Keys: map[string][]byte{"a.b": long}, Current: "a.b"},
		"current gone": {Keys: map[string][]byte{"a": long}, Current: "b"},
	} {
		if _, err := NewKeyring(cfg); err == nil {
			t.Errorf("NewKeyring(%s) = nil error", name)
		} else if strings.Contains(err.Error(), "short") && name == "short key" {
			t.Errorf("NewKeyring(%s) error %q shows the secret", name, err)
		}
	}
}

func TestShareCovers(t *testing.T) {
	tests := []struct {
		prefix, host, path string
		want               bool
	}{
		{"/", "app.example.com", "/anything", true},
		{"/docs", "app.example.com", "/docs", true},
		{"/docs", "app.example.com", "/docs/a", true},
		{"/docs/", "app.example.com", "/docs/a", true},
		{"/docs", "app.example.com", "/docsx", false},
		{"/docs", "app.example.com", "/", false},
		{"/docs", "other.example.com", "/docs", false},
		{"/", "sub.app.example.com", "/", false},
	}
	for _, tt := range tests {
		l := ShareLink{Host: "app.example.com", Path: tt.prefix}
		if got := l.Covers(tt.host, tt.path); got != tt.want {
			t.Errorf("ShareLink{%s}.Covers(%s, %s) = %v, want %v", tt.prefix, tt.host, tt.path, got, tt.want)
		}
	}
}

func TestShareGate(t *testing.T) {
	clk := newFakeClock()
	k := newKeyring(t, clk, "k1", "k1")
	g := newGate(t, Config{Default: Deny, Shares: k})
	tok := mint(t, k, "app.example.com", "/docs", 90*time.Minute)
	other := mint(t, k, "other.example.com", "/", time.Hour)

	t.Run("first visit redirects and sets the cookie", func(t *testing.T) {
		r := newRequest(t, "/docs/a?x=1&aperio_share="+url.QueryEscape(tok)+"&y=2")
		v := visitor("/docs/a")
		v.HTTPS = true
		d := g.Check(r, v)
		if d.Admitted || d.Hidden || d.Status != http.StatusFound {
			t.Fatalf("Check = %+v, want a 302", d)
		}
		if got := d.Header.Get("Location"); got != "/docs/a?x=1&y=2" {
			t.Errorf("Location = %q, want the same URL without the parameter", got)
		}
		resp := http.Response{Header: http.Header{"Set-Cookie": d.Header.Values("Set-Cookie")}}
		cs := resp.Cookies()
		if len(cs) != 1 {
			t.Fatalf("Set-Cookie = %q, want one cookie", d.Header.Values("Set-Cookie"))
		}
		c := cs[0]
		if c.Name != CookieShare || c.Value != tok || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode || c.MaxAge != 5400 || c.Path != "/" || c.Domain != "" {
			t.Errorf("cookie = %+v, want aperio_share, HttpOnly, Secure, Lax, Max-Age 5400, host-only", c)
		}
	})
	t.Run("plain http cookie is not Secure", func(t *testing.T) {
		d := g.Check(newRequest(t, "/docs?aperio_share="+tok), visitor("/docs"))
		if sc := d.Header.Get("Set-Cookie"); sc == "" || strings.Contains(sc, "Secure") {
			t.Errorf("Set-Cookie = %q, want a cookie without Secure", sc)
		}
	})
	t.Run("location cannot name another host", func(t *testing.T) {
		for _, p := range []string{"//evil.example/docs", "/\\evil.example/docs"} {
			k2 := newKeyring(t, clk, "k1", "k1")
			g2 := newGate(t, Config{Default: Deny, Shares: k2})
			root := mint(t, k2, "app.example.com", "/", time.Hour)
			d := g2.Check(newRequest(t, p+"?aperio_share="+root), visitor(p))
			if loc := d.Header.Get("Location"); !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
				t.Errorf("path %q: Location = %q, want a path on this host", p, loc)
			}
		}
	})
	t.Run("cookie admits", func(t *testing.T) {
		d := g.Check(newRequest(t, "/docs/a", "Cookie", "a=1; aperio_share="+tok), visitor("/docs/a"))
		if !d.Admitted || d.Method != MethodShare || d.User != "" {
			t.Errorf("Check = %+v, want admitted by share without a user", d)
		}
	})
	t.Run("parameters after the link's path", func(t *testing.T) {
		d := g.Check(newRequest(t, "/docs/a;jsessionid=1", "Cookie", "aperio_share="+tok), visitor("/docs/a"))
		if !d.Admitted {
			t.Errorf("Check(/docs/a;jsessionid=1) = %+v, want admitted: inside /docs under every reading", d)
		}
	})
	refused := []struct {
		name   string
		r      *http.Request
		v      Visitor
		reason string
	}{
		{"other path", newRequest(t, "/admin", "Cookie", "aperio_share="+tok), visitor("/admin"), "not this host and path"},
		{"traversal is judged on the normal form", newRequest(t, "/docs/../admin", "Cookie", "aperio_share="+tok), visitor("/admin"), "not this host and path"},
		{"a parameter on the link's segment", newRequest(t, "/docs;x/secret", "Cookie", "aperio_share="+tok), visitor("/docs/secret"), "not this host and path"},
		{"other host", newRequest(t, "/docs", "Cookie", "aperio_share="+other), visitor("/docs"), "not this host and path"},
		{"tampered", newRequest(t, "/docs", "Cookie", "aperio_share="+tok+"x"), visitor("/docs"), "signature"},
		{"bad parameter", newRequest(t, "/docs?aperio_share=v1.k1.e30.AAAA"), visitor("/docs"), "signature"},
		{"undecodable parameter", newRequest(t, "/docs?aperio_share=%zz"), visitor("/docs"), "closed"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			d := g.Check(tt.r, tt.v)
			if d.Admitted || !d.Hidden {
				t.Fatalf("Check = %+v, want hidden", d)
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to mention %q", d.Reason, tt.reason)
			}
			if strings.Contains(d.Reason, tok) {
				t.Errorf("Reason %q contains the token", d.Reason)
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		clk.Advance(2 * time.Hour)
		d := g.Check(newRequest(t, "/docs", "Cookie", "aperio_share="+tok), visitor("/docs"))
		if d.Admitted || !strings.Contains(d.Reason, "expired") {
			t.Errorf("Check after expiry = %+v, want refused as expired", d)
		}
	})
	t.Run("with methods a bad share falls through to them", func(t *testing.T) {
		g := newGate(t, Config{Shares: k, Methods: []Method{&fakeMethod{name: "basic", res: Result{Outcome: Absent, Reason: "none", Challenge: "Basic"}}}})
		d := g.Check(newRequest(t, "/docs", "Cookie", "aperio_share=junk"), visitor("/docs"))
		if d.Hidden || d.Status != http.StatusUnauthorized || !strings.Contains(d.Reason, "share cookie") {
			t.Errorf("Check = %+v, want 401 mentioning the share cookie", d)
		}
	})
}

func TestWithoutParam(t *testing.T) {
	tests := []struct{ in, want string }{
		{"aperio_share=x", ""},
		{"a=1&aperio_share=x", "a=1"},
		{"aperio_share=x&a=1&aperio_share=y&b=%20", "a=1&b=%20"},
		{"aperio_sharex=1", "aperio_sharex=1"},
		{"&&a", "a"},
	}
	for _, tt := range tests {
		if got := withoutParam(tt.in, ShareParam); got != tt.want {
			t.Errorf("withoutParam(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestKeyringUpdate: per-organization keys sign MintFor's links; Update
// swaps the keys for every holder at once, a verified token of a removed
// key included (the cache goes with the old keys), and a bad update
// changes nothing.
func TestKeyringUpdate(t *testing.T) {
	clk := newFakeClock()
	keyA1, keyA2, keyB := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("A", 32)), []byte(strings.Repeat("b", 32))
	k, err := NewKeyring(KeyringConfig{Keys: map[string][]byte{"a1": keyA1, "b1": keyB}, Orgs: map[string]string{"org_a": "a1", "org_b": "b1"}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Mint("app.example.com", "/", time.Hour); !errors.Is(err, ErrShareNoKey) {
		t.Errorf("Mint() without a Current key = %v, want ErrShareNoKey", err)
	}
	if _, _, err := k.MintFor("org_c", "app.example.com", "/", time.Hour); !errors.Is(err, ErrShareNoKey) {
		t.Errorf("MintFor(org without a key) = %v, want ErrShareNoKey", err)
	}
	tokA, _, err := k.MintFor("org_a", "a.example.com", "/", time.Hour)
	if err != nil || !strings.HasPrefix(tokA, "v1.a1.") {
		t.Fatalf("MintFor(org_a) = %q, %v; want a token of key a1", tokA, err)
	}
	tokB, _, err := k.MintFor("org_b", "b.example.com", "/", time.Hour)
	if err != nil || !strings.HasPrefix(tokB, "v1.b1.") {
		t.Fatalf("MintFor(org_b) = %q, %v; want a token of key b1", tokB, err)
	}
	for _, tok := range []string{tokA, tokB} {
		if _, err := k.Verify(tok); err != nil {
			t.Fatalf("Verify() = %v", err)
		}
	}
	bad := KeyringConfig{Keys: map[string][]byte{"a2": []byte("short")}, Orgs: map[string]string{"org_a": "zz"}}
	if err := k.Update(bad); err == nil {
		t.Fatal("Update(short key, unknown org key) = nil, want an error")
	}
	if _, err := k.Verify(tokA); err != nil {
		t.Errorf("Verify() after a refused Update = %v, want the old keys kept", err)
	}
	// org_a rotates with revoke: a1 goes; b1 stays.
	if err := k.Update(KeyringConfig{Keys: map[string][]byte{"a2": keyA2, "b1": keyB}, Orgs: map[string]string{"org_a": "a2", "org_b": "b1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(tokA); !errors.Is(err, ErrShareKey) {
		t.Errorf("Verify(revoked org_a link, verified before) = %v, want ErrShareKey", err)
	}
	if _, err := k.Verify(tokB); err != nil {
		t.Errorf("Verify(org_b link) after org_a's rotation = %v, want valid", err)
	}
	if id, ok := k.KeyFor("org_a"); !ok || id != "a2" {
		t.Errorf("KeyFor(org_a) = %q, %v; want a2", id, ok)
	}
}

// TestShareVerifyRefusesRespellings: a link has one text. Line breaks in
// its MAC or payload (FuzzShareVerify's find) and set trailing bits are
// refused, not verified as the same link.
func TestShareVerifyRefusesRespellings(t *testing.T) {
	k := newKeyring(t, newFakeClock(), "k1", "k1")
	tok := mint(t, k, "app.example.com", "/docs", time.Hour)
	if _, err := k.Verify(tok); err != nil {
		t.Fatalf("Verify(canonical) = %v", err)
	}
	i := strings.LastIndexByte(tok, '.')
	head, mac := tok[:i], tok[i+1:]
	j := strings.LastIndexByte(head, '.')
	prefix, payload := head[:j], head[j+1:]
	var texts []string
	for _, r := range b64.RespellingsForTest(mac) {
		texts = append(texts, head+"."+r)
	}
	for _, r := range b64.RespellingsForTest(payload) {
		texts = append(texts, prefix+"."+r+"."+mac)
	}
	for _, s := range texts {
		if link, err := k.Verify(s); err == nil {
			t.Errorf("Verify(%q) = %+v, nil; want a refusal", s, link)
		}
	}
}
