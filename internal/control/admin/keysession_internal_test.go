package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aperio-dev/aperio/internal/b64"
)

// TestKeySessionHashesRefuseRespellings: a session secret has one cookie
// text; a respelling with set trailing bits (the same length, so the
// length check passes) is not looked up as the same session.
func TestKeySessionHashesRefuseRespellings(t *testing.T) {
	secret := bytes.Repeat([]byte{0x5a}, keySecretBytes)
	good := base64.RawURLEncoding.EncodeToString(secret)
	want := sha256.Sum256(secret)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: keySessionCookieName(false), Value: good})
	if got := keySessionHashes(r); len(got) != 1 || !bytes.Equal(got[0], want[:]) {
		t.Fatalf("keySessionHashes(canonical) = %x, want [%x]", got, want)
	}
	// The line-break spellings cannot reach a cookie (net/http drops or
	// trims them); the trailing-bits one can.
	for _, v := range b64.RespellingsForTest(good)[2:] {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Cookie", keySessionCookieName(false)+"="+v)
		if got := keySessionHashes(r); len(got) != 0 {
			t.Errorf("keySessionHashes(%q) = %x, want none", v, got)
		}
	}
}
