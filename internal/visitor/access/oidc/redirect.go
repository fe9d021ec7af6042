package oidc

import (
	"net/url"
	"strings"
)

// maxReturnBytes bounds the path a login returns to.
const maxReturnBytes = 2048

// safeReturn returns target if it is a path on the same host, and "/"
// otherwise. Same host means: it starts with one '/' and no second '/' or
// '\' (browsers read "//evil" and "/\evil" as another host), it has no
// scheme and no authority, and it holds no control character, space,
// backslash or byte outside ASCII anywhere (some browsers drop tabs and
// newlines, turning "/\t/evil" into "//evil"). Refusing instead of
// repairing keeps the rule small enough to be sure of.
func safeReturn(target string) string {
	if target == "" || len(target) > maxReturnBytes || target[0] != '/' {
		return "/"
	}
	if len(target) > 1 && (target[1] == '/' || target[1] == '\\') {
		return "/"
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "/"
	}
	// A percent-encoded slash or backslash right after the first slash
	// decodes to "//" or "/\" in a later hop that unescapes the path.
	if p := u.EscapedPath(); len(p) >= 4 && p[1] == '%' {
		if esc := strings.ToUpper(p[1:4]); esc == "%2F" || esc == "%5C" {
			return "/"
		}
	}
	return target
}
