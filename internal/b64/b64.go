// Package b64 decodes base64 strictly: one text per value. Go's decoders
// skip CR and LF anywhere in their input and, unless Strict, accept
// non-zero trailing bits, so one token, cookie or signature would have
// many spellings; a denylist, a cache key or a log match on the text
// could then be sidestepped by a respelling. Every decoder of a
// credential goes through this package.
package b64

import (
	"encoding/base64"
	"errors"
	"strings"
)

// ErrNotCanonical is returned for input with a byte outside the
// encoding's alphabet (line breaks included), misplaced padding, or
// trailing bits that are not zero.
var ErrNotCanonical = errors.New("b64: not canonical base64")

const (
	urlAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	stdAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
)

var (
	rawURL = base64.RawURLEncoding.Strict()
	rawStd = base64.RawStdEncoding.Strict()
	std    = base64.StdEncoding.Strict()
)

// DecodeRawURL decodes unpadded base64url (RFC 4648 §5, no '=').
func DecodeRawURL(s string) ([]byte, error) {
	return decode(rawURL, urlAlphabet, false, s)
}

// DecodeRawStd decodes unpadded standard base64.
func DecodeRawStd(s string) ([]byte, error) {
	return decode(rawStd, stdAlphabet, false, s)
}

// DecodeStd decodes padded standard base64 (the form of HTTP Basic
// credentials and Standard Webhooks signatures).
func DecodeStd(s string) ([]byte, error) {
	return decode(std, stdAlphabet, true, s)
}

// decode refuses any byte outside alphabet (and '=' outside the final
// padding when padded), then decodes with the Strict encoding, which
// refuses non-zero trailing bits.
func decode(enc *base64.Encoding, alphabet string, padded bool, s string) ([]byte, error) {
	body := s
	if padded {
		body = strings.TrimRight(s, "=")
		if len(s)-len(body) > 2 {
			return nil, ErrNotCanonical
		}
	}
	for i := 0; i < len(body); i++ {
		if !inAlphabet(alphabet, body[i]) {
			return nil, ErrNotCanonical
		}
	}
	out, err := enc.DecodeString(s)
	if err != nil {
		return nil, ErrNotCanonical
	}
	return out, nil
}

// inAlphabet reports whether c is one of the 64 symbols; the first 62 are
// the same in both alphabets, so only the last two are compared by table.
func inAlphabet(alphabet string, c byte) bool {
	switch {
	case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return true
	}
	return c == alphabet[62] || c == alphabet[63]
}

// RespellingsForTest returns texts that Go's lax decoders read as the
// same bytes as the canonical text s (base64 of either alphabet, padded
// or not): s with a line break inside, s with CRLF appended, and, when
// its last symbol carries unused bits, s with one of them set. Tests of
// every decoder of credentials feed them in and expect a refusal.
func RespellingsForTest(s string) []string {
	out := []string{s[:len(s)/2] + "\n" + s[len(s)/2:], s + "\r\n"}
	body := strings.TrimRight(s, "=")
	pad := len(s) - len(body)
	if unused := (len(body) * 6) % 8; unused > 0 && len(body) > 0 {
		last := body[len(body)-1]
		i := strings.IndexByte(urlAlphabet, last)
		if i < 0 {
			i = strings.IndexByte(stdAlphabet, last)
		}
		alphabet := urlAlphabet
		if strings.ContainsAny(s, "+/") {
			alphabet = stdAlphabet
		}
		if i >= 0 {
			out = append(out, body[:len(body)-1]+string(alphabet[i^1])+s[len(s)-pad:])
		}
	}
	return out
}
