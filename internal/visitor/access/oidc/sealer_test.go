package oidc

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/b64"
)

func testKey(id byte, fill string) Key {
	return Key{ID: id, Secret: []byte(strings.Repeat(fill, MinSecretBytes))}
}

func mustSealer(t testing.TB, purpose string, keys ...Key) *Sealer {
	t.Helper()
	s, err := NewSealer(purpose, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealerRoundTrip(t *testing.T) {
	s := mustSealer(t, "session", testKey(1, "a"))
	for _, plain := range [][]byte{{}, []byte("x"), bytes.Repeat([]byte{0xff}, 1000)} {
		sealed := s.Seal(plain)
		got, err := s.Open(sealed)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("Open(Seal(%d bytes)) = %d bytes, %v; want the plaintext", len(plain), len(got), err)
		}
	}
	if a, b := s.Seal([]byte("same")), s.Seal([]byte("same")); a == b {
		t.Error("two seals of the same plaintext are equal; the nonce is not random")
	}
}

func TestSealerRotation(t *testing.T) {
	old := mustSealer(t, "session", testKey(1, "a"))
	rotated := mustSealer(t, "session", testKey(2, "b"), testKey(1, "a"))
	fresh := mustSealer(t, "session", testKey(2, "b"))

	sealedOld := old.Seal([]byte("before"))
	if got, err := rotated.Open(sealedOld); err != nil || string(got) != "before" {
		t.Errorf("rotated keyring opens an old value = %q, %v; want it open", got, err)
	}
	sealedNew := rotated.Seal([]byte("after"))
	if _, err := fresh.Open(sealedNew); err != nil {
		t.Errorf("the new key alone cannot open what the rotated keyring sealed: %v", err)
	}
	if _, err := old.Open(sealedNew); !errors.Is(err, ErrSealed) {
		t.Errorf("the old keyring opens a value sealed with the new current key: %v", err)
	}
	if _, err := fresh.Open(sealedOld); !errors.Is(err, ErrSealed) {
		t.Errorf("a keyring without the old key opens its value: %v", err)
	}
}

func TestSealerRefusesHostileValues(t *testing.T) {
	s := mustSealer(t, "session", testKey(1, "a"))
	good := s.Seal([]byte("payload"))
	raw, err := base64.RawURLEncoding.DecodeString(good)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	// Same secret, same id, another purpose; and another secret under the same id.
	otherPurpose := mustSealer(t, "login", testKey(1, "a")).Seal([]byte("payload"))
	otherSecret := mustSealer(t, "session", testKey(1, "z")).Seal([]byte("payload"))
	for _, tc := range []struct{ name, value string }{
		{"empty", ""},
		{"not base64url", "!!!!"},
		{"padded base64", good + "=="},
		{"std base64 alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+/"},
		{"too short", base64.RawURLEncoding.EncodeToString(raw[:sealMinRaw-1])},
		{"truncated tag", base64.RawURLEncoding.EncodeToString(raw[:len(raw)-1])},
		{"trailing byte", base64.RawURLEncoding.EncodeToString(append(bytes.Clone(raw), 0))},
		{"version flipped", flip(0)},
		{"key id flipped", flip(1)},
		{"nonce flipped", flip(2)},
		{"ciphertext flipped", flip(sealHeader + sealNonceSize)},
		{"tag flipped", flip(len(raw) - 1)},
		{"another purpose", otherPurpose},
		{"another secret, same id", otherSecret},
		{"oversized", strings.Repeat("A", MaxSealedBytes+1)},
		{"line break inside", b64.RespellingsForTest(good)[0]},
		{"CRLF after", b64.RespellingsForTest(good)[1]},
		{"trailing bits set", respelledBits(t, s)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Open(tc.value)
			if !errors.Is(err, ErrSealed) || got != nil {
				t.Errorf("Open(%.40q) = %q, %v; want nil, ErrSealed", tc.value, got, err)
			}
		})
	}
}

func TestNewSealerRefusesBadKeyrings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		purpose string
		keys    []Key
	}{
		{"no purpose", "", []Key{testKey(1, "a")}},
		{"no key", "session", nil},
		{"short secret", "session", []Key{{ID: 1, Secret: []byte("short")}}},
		{"duplicate id", "session", []Key{testKey(1, "a"), testKey(1, "b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := NewSealer(tc.purpose, tc.keys...); err == nil || s != nil {
				t.Errorf("NewSealer(%q, %d keys) = %v, %v; want an error", tc.purpose, len(tc.keys), s, err)
			}
		})
	}
}

func FuzzSealerOpen(f *testing.F) {
	s := mustSealer(f, "session", testKey(1, "a"))
	f.Add(s.Seal([]byte("payload")))
	f.Add("")
	f.Add("AQE")
	f.Fuzz(func(t *testing.T, v string) {
		plain, err := s.Open(v)
		if err != nil && !errors.Is(err, ErrSealed) {
			t.Fatalf("Open error %v does not wrap ErrSealed", err)
		}
		if err == nil && s.Seal(plain) == "" {
			t.Fatal("reseal of an opened value is empty")
		}
	})
}

// respelledBits seals a payload whose text ends in a symbol with unused
// bits and returns that text with one of them set: the same bytes to a
// lax decoder, a refusal to Open.
func respelledBits(t *testing.T, s *Sealer) string {
	t.Helper()
	for n := range 3 {
		good := s.Seal(bytes.Repeat([]byte("p"), 7+n))
		if r := b64.RespellingsForTest(good); len(r) == 3 {
			return r[2]
		}
	}
	t.Fatal("no seal length with unused bits")
	return ""
}
