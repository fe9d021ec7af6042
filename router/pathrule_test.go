package router

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// The path rule's differential test (#38 item 2): for a generated corpus
// of request paths, the bind aperio routes a path to is compared with the
// bind the same path names under two reference readings, written here
// from their documented behaviour:
//
//   - nginx: the whole path percent-decoded ("%2F" becomes a separator,
//     "%3B" a ";"), slashes merged (merge_slashes on, the default), "."
//     and ".." resolved, a ".." above the root refused; ";" is data.
//   - Tomcat (and Spring MVC on it): ";" path parameters removed from
//     every segment of the undecoded path (so "..;" is ".."), an encoded
//     slash or backslash refused (ALLOW_ENCODED_SLASH off, Spring's
//     StrictHttpFirewall), then decoded, "//" collapsed and dot segments
//     resolved.
//
// Aperio must never route a path to a less protected bind than either
// reading names, and where both readings agree it routes to that bind or
// refuses; a path with neither a parameter nor an encoded separator,
// which both readings accept, is always served.

// diffBinds are the binds of app.test and whether each is gated (a bearer
// key) or open. "/admin/public" is a hole: open inside a gated bind.
var diffBinds = map[string]bool{
	"/":             false,
	"/admin":        true,
	"/admin/public": false,
	"/a":            true,
	"/public":       false,
}

// diffSegments are the segments the corpus paths are made of.
var diffSegments = []string{
	"a", "admin", "public", "", ".", "..", ";x", "..;", ".;x", "admin;x",
	"%2e", "%2e%2e", "%2f", "%3b", "%61dmin", "admin%2fpublic", "%2e%2e;",
}

// diffCorpus returns every path of one to three diffSegments.
func diffCorpus() []string {
	var out []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		for _, s := range diffSegments {
			p := prefix + "/" + s
			out = append(out, p)
			if depth > 1 {
				grow(p, depth-1)
			}
		}
	}
	grow("", 3)
	return out
}

// resolveDots merges slashes and resolves "." and ".." of a decoded path;
// false when a ".." climbs above the root.
func resolveDots(p string) (string, bool) {
	segs := strings.Split(p, "/")[1:]
	out := []string{}
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case "", ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) == 0 {
				return "", false
			}
			out = out[:len(out)-1]
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/"), true
}

// nginxPath is the path nginx serves for the request path raw.
func nginxPath(raw string) (string, bool) {
	dec, err := url.PathUnescape(raw)
	if err != nil {
		return "", false
	}
	return resolveDots(dec)
}

// tomcatPath is the path Tomcat serves for the request path raw.
func tomcatPath(raw string) (string, bool) {
	segs := strings.Split(raw, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ';'); j >= 0 {
			segs[i] = s[:j]
		}
	}
	p := strings.Join(segs, "/")
	if l := strings.ToLower(p); strings.Contains(l, "%2f") || strings.Contains(l, "%5c") {
		return "", false
	}
	dec, err := url.PathUnescape(p)
	if err != nil {
		return "", false
	}
	return resolveDots(dec)
}

// bindOf returns the longest bind of diffBinds that path lies under by
// whole segments.
func bindOf(path string) string {
	binds := make([]string, 0, len(diffBinds))
	for b := range diffBinds {
		binds = append(binds, b)
	}
	sort.Slice(binds, func(i, j int) bool { return len(binds[i]) > len(binds[j]) })
	for _, b := range binds {
		if b == "/" || path == b || strings.HasPrefix(path, b+"/") {
			return b
		}
	}
	return ""
}

// diffRouter serves diffBinds, each bind by a client named after it.
func diffRouter(t testing.TB) *Router {
	rt := newRouter(t, Config{IPLimitMax: 0})
	i := 0
	for b, gated := range diffBinds {
		s := svc(b, "app.test")
		if b == "/" {
			s = svc("", "app.test")
		}
		if gated {
			s.Access = &tunnel.Access{Auth: tunnel.Auth{Bearer: &tunnel.BearerAuth{Keys: map[string]string{"ci": testKeyDigest}}}}
		} else {
			s.Access = &tunnel.Access{Public: true}
		}
		i++
		rt.reg.update(newConn(b, i), ann(s))
	}
	return rt
}

// aperioBind routes raw through rt with the bearer key every gated bind
// takes, and returns the bind that served it, or false when the request
// was refused with 400.
func aperioBind(t testing.TB, rt *Router, raw string) (string, bool) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://app.test"+raw, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, req)
	switch w.Code {
	case http.StatusOK:
		return strings.TrimSuffix(w.Body.String(), "/0"), true
	case http.StatusBadRequest:
		return "", false
	}
	t.Fatalf("GET %s = %d %q, want 200 or 400", raw, w.Code, w.Body.String())
	return "", false
}

func TestPathRuleDifferential(t *testing.T) {
	rt := diffRouter(t)
	served, refused := 0, 0
	for _, raw := range diffCorpus() {
		got, ok := aperioBind(t, rt, raw)
		np, nok := nginxPath(raw)
		tp, tok := tomcatPath(raw)
		nb, tb := bindOf(np), bindOf(tp)
		if !ok {
			refused++
			plain := !strings.Contains(raw, ";") && !strings.Contains(strings.ToLower(raw), "%2f")
			if plain && nok && tok && nb == tb {
				t.Errorf("GET %s refused, want it served by %s (nginx and Tomcat agree, no parameter, no encoded slash)", raw, nb)
			}
			continue
		}
		served++
		for _, m := range []struct {
			name, bind string
			ok         bool
		}{{"nginx", nb, nok}, {"Tomcat", tb, tok}} {
			if m.ok && diffBinds[m.bind] && !diffBinds[got] {
				t.Errorf("GET %s served by open bind %s; %s reads it as %s, under gated bind %s", raw, got, m.name, map[bool]string{true: np, false: tp}[m.name == "nginx"], m.bind)
			}
		}
		if nok && tok && nb == tb && got != nb {
			t.Errorf("GET %s served by bind %s; nginx and Tomcat both name bind %s", raw, got, nb)
		}
	}
	t.Logf("%d paths: %d served, %d refused with 400", served+refused, served, refused)
	if served == 0 || refused == 0 {
		t.Errorf("served %d, refused %d: want both", served, refused)
	}
}
