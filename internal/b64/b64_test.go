package b64

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
)

func TestDecodeRefusesRespellings(t *testing.T) {
	raw := []byte("aperio share token \x00\xff\xfe")
	url := base64.RawURLEncoding.EncodeToString(raw)
	std := base64.StdEncoding.EncodeToString(raw[:len(raw)-1])
	tests := []struct {
		name string
		dec  func(string) ([]byte, error)
		in   string
		ok   bool
	}{
		{"url canonical", DecodeRawURL, url, true},
		{"url LF inside", DecodeRawURL, url[:5] + "\n" + url[5:], false},
		{"url CR inside", DecodeRawURL, url[:5] + "\r" + url[5:], false},
		{"url CRLF trailing", DecodeRawURL, url + "\r\n", false},
		{"url space", DecodeRawURL, url[:3] + " " + url[3:], false},
		{"url std symbol", DecodeRawURL, "ab+/", false},
		{"url padded", DecodeRawURL, url + "=", false},
		{"url trailing bits", DecodeRawURL, "AB", false}, // "AA" is canonical for one zero byte
		{"url trailing bits zero", DecodeRawURL, "AA", true},
		{"url empty", DecodeRawURL, "", true},
		{"std canonical", DecodeStd, std, true},
		{"std LF", DecodeStd, std[:4] + "\n" + std[4:], false},
		{"std url symbol", DecodeStd, "ab-_", false},
		{"std pad inside", DecodeStd, "QQ==QQ==", false},
		{"std three pads", DecodeStd, "Q===", false},
		{"std missing pad", DecodeStd, "QQ", false},
		{"std trailing bits", DecodeStd, "QR==", false},
		{"rawstd canonical", DecodeRawStd, base64.RawStdEncoding.EncodeToString(raw), true},
		{"rawstd LF", DecodeRawStd, "QUJD\nREVG", false},
		{"rawstd padded", DecodeRawStd, "QQ==", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.dec(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("decode(%q) = %v, want success", tt.in, err)
				}
				return
			}
			if !errors.Is(err, ErrNotCanonical) {
				t.Fatalf("decode(%q) = %x, %v, want ErrNotCanonical", tt.in, got, err)
			}
		})
	}
}

// FuzzDecodeRawURL: whatever decodes is the one canonical spelling of its
// bytes, so the text is a function of the value.
func FuzzDecodeRawURL(f *testing.F) {
	f.Add("AA")
	f.Add("nLCUH\n\n\nXfOZ")
	f.Add("abc-_")
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := DecodeRawURL(s)
		if err != nil {
			return
		}
		if back := base64.RawURLEncoding.EncodeToString(raw); back != s {
			t.Fatalf("DecodeRawURL(%q) accepted a non-canonical spelling of %q", s, back)
		}
	})
}

// FuzzDecodeStd is FuzzDecodeRawURL for padded standard base64.
func FuzzDecodeStd(f *testing.F) {
	f.Add("QQ==")
	f.Add("QR==")
	f.Add("QUJD\r\nREVG")
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := DecodeStd(s)
		if err != nil {
			return
		}
		back := base64.StdEncoding.EncodeToString(raw)
		if back != s {
			t.Fatalf("DecodeStd(%q) accepted a non-canonical spelling of %q", s, back)
		}
		if !bytes.Equal(raw, mustStd(t, back)) {
			t.Fatalf("round trip changed the bytes")
		}
	})
}

func mustStd(t *testing.T, s string) []byte {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestRespellingsForTestDecodeLaxly(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 31, 32, 33} {
		raw := bytes.Repeat([]byte{0xa5}, n)
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.StdEncoding} {
			s := enc.EncodeToString(raw)
			resp := RespellingsForTest(s)
			if n%3 != 0 && len(resp) != 3 {
				t.Errorf("RespellingsForTest(%q) = %d texts, want 3 (trailing bits)", s, len(resp))
			}
			for _, r := range resp {
				got, err := enc.DecodeString(r)
				if err != nil || !bytes.Equal(got, raw) {
					t.Errorf("lax decode of respelling %q = %x, %v; want %x", r, got, err, raw)
				}
			}
		}
	}
}
