package access

import (
	"net/http"
	"slices"
	"testing"
)

// TestDropServerSetCookies: a backend's Set-Cookie lines that name a
// cookie of the server's namespace go, in every spelling; the app's own
// stay, in order.
func TestDropServerSetCookies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want []string
	}{
		{"none", nil, nil},
		{"app only", []string{"a=1", "b=2; Path=/"}, []string{"a=1", "b=2; Path=/"}},
		{"every server cookie", []string{
			"aperio_session=x", "__Host-aperio_session=x; Secure", "aperio_login=x", "aperio_share=x",
			"aperio_admin=x", "aperio_admin_login=x", "aperio_admin_session=x", "__Host-aperio_admin_session=x",
			"aperio_affinity=x", "aperio_lang=de", "aperio_future=x",
		}, nil},
		{"spellings", []string{"APERIO_SESSION=x", "__host-Aperio_Admin=x", "__SECURE-aperio_share=x", " aperio_admin =x", "\taperio_login=x"}, nil},
		{"mixed, order kept", []string{"a=1", "aperio_session=x", "b=2", "__Host-aperio_admin=x", "c=3"}, []string{"a=1", "b=2", "c=3"}},
		{"look-alikes stay", []string{"xaperio_session=1", "aperio=1", "__Host-app=1", "my_aperio_session=1"}, []string{"xaperio_session=1", "aperio=1", "__Host-app=1", "my_aperio_session=1"}},
		{"no equals sign", []string{"aperio_session", "garbage"}, []string{"garbage"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.in != nil {
				h["Set-Cookie"] = slices.Clone(tc.in)
			}
			DropServerSetCookies(h)
			if got := h["Set-Cookie"]; !slices.Equal(got, tc.want) || (tc.want == nil && got != nil) {
				t.Errorf("DropServerSetCookies(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
