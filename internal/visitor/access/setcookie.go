package access

import (
	"net/http"
	"strings"
)

// ServerCookiePrefix opens the name of every cookie the server itself
// sets: the share, session and login cookies of visitors, the admin
// login's, the dashboard's language and lb_strategy sticky's
// aperio_affinity. The namespace is reserved: a backend may set none of
// them (DropServerSetCookies).
const ServerCookiePrefix = "aperio_"

// DropServerSetCookies removes from h, the header of a backend's
// response, every Set-Cookie line that names a cookie of the server's
// namespace (ServerCookiePrefix, any case, with or without the __Host-
// or __Secure- prefix), so that an app cannot plant or overwrite a
// visitor's or an operator's session (session fixation) on its hostname.
// It allocates only when it removes a line.
func DropServerSetCookies(h http.Header) {
	lines := h["Set-Cookie"]
	for i, line := range lines {
		if !serverSetCookie(line) {
			continue
		}
		kept := append(lines[:i:i], make([]string, 0, len(lines)-i-1)...)
		for _, l := range lines[i+1:] {
			if !serverSetCookie(l) {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(h, "Set-Cookie")
			return
		}
		h["Set-Cookie"] = kept
		return
	}
}

// serverSetCookie reports whether a Set-Cookie line names a cookie of the
// server's namespace. The name is what precedes the first "=", trimmed
// of spaces as browsers trim it.
func serverSetCookie(line string) bool {
	name, _, _ := strings.Cut(line, "=")
	name = strings.TrimSpace(name)
	for _, p := range []string{"__host-", "__secure-"} {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			name = name[len(p):]
			break
		}
	}
	return len(name) >= len(ServerCookiePrefix) && strings.EqualFold(name[:len(ServerCookiePrefix)], ServerCookiePrefix)
}
