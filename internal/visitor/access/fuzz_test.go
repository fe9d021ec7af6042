package access

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzShareVerify feeds arbitrary tokens to a keyring: none may panic,
// and one that verifies must be exactly what the key signs for its first
// three parts (no second spelling of a token verifies).
func FuzzShareVerify(f *testing.F) {
	k := newKeyring(f, newFakeClock(), "k1", "k1")
	tok := mint(f, k, "app.example.com", "/docs", time.Hour)
	f.Add(tok)
	f.Add("v1.k1..")
	f.Add("v1.k1.e30.")
	f.Add(strings.Replace(tok, "v1.k1.", "v1.k2.", 1))
	f.Fuzz(func(t *testing.T, s string) {
		link, err := k.Verify(s)
		if err != nil {
			return
		}
		i := strings.LastIndexByte(s, '.')
		want := s[:i] + "." + base64.RawURLEncoding.EncodeToString(k.mac(k.state.Load().keys["k1"], s[:i]))
		if s != want || link.Host == "" {
			t.Fatalf("Verify(%q) = %+v, nil; the key signs %q", s, link, want)
		}
	})
}

// FuzzRemoveCookies checks that no Cookie line keeps a server cookie
// after removeCookies, whatever the line, and that cookieValue then finds
// none.
func FuzzRemoveCookies(f *testing.F) {
	f.Add("a=1; aperio_share=x; b=2")
	f.Add(" aperio_session = y ;;")
	f.Add("aperio_share")
	f.Fuzz(func(t *testing.T, line string) {
		h := http.Header{"Cookie": {line}}
		removeCookies(h, serverCookies)
		for _, name := range serverCookies {
			if v, ok := cookieValue(h, name); ok {
				t.Fatalf("removeCookies(%q) left %s=%q in %q", line, name, v, h["Cookie"])
			}
		}
	})
}
