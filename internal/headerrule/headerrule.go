// Package headerrule owns what a header rule may name and set, the one
// check both binaries run: the server on its headers: rules and on the
// rules client services announce, the client on its services' headers
// before it announces them.
package headerrule

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// MaxValue bounds one header value of a rule, in bytes.
const MaxValue = 4096

// MaxService bounds the entries (set, add, remove) one client service may
// announce.
const MaxService = 64

// refused are the names no rule may touch: hop-by-hop and framing
// headers (the proxy owns them; changing one would desynchronize the
// exchange) and Host (routing). X-Aperio-* is refused too, in Check: those
// carry the visitor's identity and the server's own answers.
var refused = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true, "Host": true,
}

// Check reports what is wrong with a header rule's name and value: an
// empty or non-token name, a hop-by-hop or framing header, X-Aperio-*, or
// a value with a control character (CR, LF, NUL) or longer than MaxValue.
func Check(name, value string) error {
	if !ValidName(name) {
		return fmt.Errorf("%q is not a header name", name)
	}
	canon := http.CanonicalHeaderKey(name)
	if refused[canon] {
		return fmt.Errorf("%s is a hop-by-hop or framing header: the proxy owns it", canon)
	}
	if strings.HasPrefix(canon, "X-Aperio-") {
		return fmt.Errorf("%s: X-Aperio-* headers are aperio's own", canon)
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("%s: %w", canon, err)
	}
	return nil
}

// CheckValue reports a header value with a control character or longer
// than MaxValue.
func CheckValue(v string) error {
	if len(v) > MaxValue {
		return fmt.Errorf("value of %d bytes, at most %d", len(v), MaxValue)
	}
	if strings.ContainsFunc(v, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
		return errors.New("value holds a control character (CR, LF, NUL...)")
	}
	return nil
}

// ValidName reports whether name is a header name (RFC 9110 token) of at
// most 256 bytes.
func ValidName(name string) bool {
	return name != "" && len(name) <= 256 && !strings.ContainsFunc(name, func(c rune) bool { return !isTokenChar(c) })
}

func isTokenChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)
}

// SameName reports whether header names a and b are one name once ASCII
// case is ignored and "_" is read as "-": how CGI-derived environments
// (PHP's $_SERVER, WSGI, Rack) read them, each spelling becoming the
// same HTTP_X_NAME variable. A filter of a reserved name that compares
// with it catches X_Aperio_User as well as X-Aperio-User. It allocates
// nothing.
func SameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldByte(a[i]) != foldByte(b[i]) {
			return false
		}
	}
	return true
}

// HasPrefixName reports whether header name k starts with prefix under
// SameName's folding.
func HasPrefixName(k, prefix string) bool {
	return len(k) >= len(prefix) && SameName(k[:len(prefix)], prefix)
}

// foldByte folds c for SameName: lower case, and "_" as "-".
func foldByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}
