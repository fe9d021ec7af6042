package headerrule

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		ok          bool
	}{
		{"X-Env", "prod", true},
		{"cache-control", "no-store, max-age=0", true},
		{"X-Tab", "a\tb", true},
		{"Keep-Alive", "5", false},
		{"te", "trailers", false},
		{"Upgrade", "websocket", false},
		{"Proxy-Authorization", "x", false},
		{"X-Aperio-Auth", "basic", false},
		{"X-Env", "a\rb", false},
		{"X-Env", "del\x7f", false},
		{"X:Env", "", false},
		{strings.Repeat("a", 257), "", false},
		{"X-Env", strings.Repeat("a", MaxValue+1), false},
	} {
		if err := Check(tt.name, tt.value); (err == nil) != tt.ok {
			t.Errorf("Check(%.20q, %.20q) = %v, want ok %v", tt.name, tt.value, err, tt.ok)
		}
	}
}

func TestSameName(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"X-Aperio-User", "X-Aperio-User", true},
		{"X_Aperio_User", "X-Aperio-User", true},
		{"x-aperio_user", "X-Aperio-User", true},
		{"X-APERIO-USER", "x_aperio_user", true},
		{"X-Aperio-Users", "X-Aperio-User", false},
		{"X.Aperio.User", "X-Aperio-User", false},
		{"", "", true},
	} {
		if got := SameName(tt.a, tt.b); got != tt.want {
			t.Errorf("SameName(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
	if !HasPrefixName("X_Forwarded_For", "X-Forwarded-") || HasPrefixName("X-Forward", "X-Forwarded-") {
		t.Errorf("HasPrefixName: want X_Forwarded_For under X-Forwarded-, X-Forward not")
	}
}
