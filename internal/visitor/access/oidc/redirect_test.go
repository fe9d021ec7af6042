package oidc

import (
	"net/url"
	"strings"
	"testing"
)

func TestSafeReturn(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/docs/page?q=1&r=%2F", "/docs/page?q=1&r=%2F"},
		{"/a/b/#frag", "/a/b/#frag"},
		{"/%E2%9C%93", "/%E2%9C%93"},
		{"", "/"},
		{"//evil.example", "/"},
		{"//evil.example/path", "/"},
		{"///evil.example", "/"},
		{"/\\evil.example", "/"},
		{"\\/evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/a\\b", "/"},
		{"https://evil.example/", "/"},
		{"HTTPS://evil.example/", "/"},
		{"http:evil.example", "/"},
		{"http:/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"data:text/html,x", "/"},
		{"evil.example", "/"},
		{"./evil", "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r\nLocation: https://evil.example", "/"},
		{"/a b", "/"},
		{"/\x00", "/"},
		{"/\x7f", "/"},
		{"/é", "/"},
		{"/%2F%2Fevil.example", "/"},
		{"/%2f%2fevil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/%zz", "/"},
		{"/" + strings.Repeat("a", maxReturnBytes), "/"},
	} {
		if got := safeReturn(tc.in); got != tc.want {
			t.Errorf("safeReturn(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzSafeReturn(f *testing.F) {
	for _, s := range []string{"/", "//evil", "/\\evil", "https://evil", "/%2F%2Fevil", "/a?b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := safeReturn(in)
		if got == "/" {
			return
		}
		// Whatever passes is a same-host path as any URL parser reads it.
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") || strings.ContainsAny(got, "\\\t\r\n ") {
			t.Fatalf("safeReturn(%q) = %q, which leaves the host", in, got)
		}
		ref, err := url.Parse("https://app.example.com/base")
		if err != nil {
			t.Fatal(err)
		}
		if r := ref.ResolveReference(u); r.Host != "app.example.com" {
			t.Fatalf("safeReturn(%q) = %q resolves to host %q", in, got, r.Host)
		}
	})
}

func TestRedirectURI(t *testing.T) {
	p := testProvider(t, t0)
	fixed := testProvider(t, t0)
	fixed.cfg.RedirectURL = "https://aperio.example.com:8443" + CallbackPath
	var err error
	fixed.fixed, err = url.Parse(fixed.cfg.RedirectURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		p       *Provider
		reqHost string
		v       Visit
		want    string // "" means an error
	}{
		{"plain", p, "app.example.com", Visit{Host: "app.example.com"}, "http://app.example.com" + CallbackPath},
		{"secure keeps the port", p, "App.Example.com:8443", Visit{Host: "app.example.com", Secure: true}, "https://app.example.com:8443" + CallbackPath},
		{"port of another host ignored", p, "evil.example:1", Visit{Host: "app.example.com"}, "http://app.example.com" + CallbackPath},
		{"port not digits ignored", p, "app.example.com:80@evil.example", Visit{Host: "app.example.com"}, "http://app.example.com" + CallbackPath},
		{"host with a slash refused", p, "x", Visit{Host: "app.example.com/evil"}, ""},
		{"host with @ refused", p, "x", Visit{Host: "evil.example@app.example.com"}, ""},
		{"empty host refused", p, "x", Visit{}, ""},
		{"fixed URL for its host", fixed, "aperio.example.com", Visit{Host: "aperio.example.com"}, fixed.cfg.RedirectURL},
		{"fixed URL not for others", fixed, "app.example.com", Visit{Host: "app.example.com", Secure: true}, "https://app.example.com" + CallbackPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := requestWith()
			r.Host = tc.reqHost
			got, err := tc.p.redirectURI(r, tc.v.Host, tc.v.Secure)
			if (err != nil) != (tc.want == "") || got != tc.want {
				t.Errorf("redirectURI(Host %q, %+v) = %q, %v; want %q", tc.reqHost, tc.v, got, err, tc.want)
			}
		})
	}
}
