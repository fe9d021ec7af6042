package access

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseIPRules(t *testing.T) {
	r, err := ParseIPRules([]string{" 10.0.0.0/8", "2001:db8::1", "::ffff:192.0.2.0/120"}, []string{"10.1.2.3"})
	if err != nil {
		t.Fatalf("ParseIPRules: %v", err)
	}
	want := []string{"10.0.0.0/8", "2001:db8::1/128", "192.0.2.0/24"}
	for i, p := range r.Allowed {
		if p.String() != want[i] {
			t.Errorf("Allowed[%d] = %s, want %s", i, p, want[i])
		}
	}
	_, err = ParseIPRules([]string{"10.0.0.0/33", "ok", "fe80::1%eth0"}, []string{"1.2.3.4/8x"})
	if err == nil {
		t.Fatal("ParseIPRules(bad) = nil error")
	}
	for _, frag := range []string{"allowed_ips entry 0", "allowed_ips entry 1", "allowed_ips entry 2", "denied_ips entry 0"} {
		if !strings.Contains(err.Error(), frag) {
			t.Errorf("error %q does not name %s", err, frag)
		}
	}
	if _, err := ParseIPRules(make([]string, MaxIPRules+1), nil); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("ParseIPRules(too many) = %v, want the bound", err)
	}
}

func TestIPRulesAdmits(t *testing.T) {
	r, err := ParseIPRules([]string{"10.0.0.0/8", "2001:db8::/32"}, []string{"10.9.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"10.9.1.1", false}, // denied wins
		{"::ffff:10.9.1.1", false},
		{"11.0.0.1", false},
		{"2001:db8::5", true},
		{"", false}, // unknown visitor with an allow list
	}
	for _, tt := range tests {
		var a netip.Addr
		if tt.addr != "" {
			a = netip.MustParseAddr(tt.addr)
		}
		if got := r.Admits(a); got != tt.want {
			t.Errorf("Admits(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	denyOnly := IPRules{Denied: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	if !denyOnly.Admits(netip.Addr{}) || !denyOnly.Admits(netip.MustParseAddr("198.51.100.1")) || denyOnly.Admits(netip.MustParseAddr("192.0.2.9")) {
		t.Error("deny-only rules: want unknown and others admitted, the denied prefix refused")
	}
	if !(IPRules{}).Admits(netip.MustParseAddr("192.0.2.9")) {
		t.Error("zero IPRules refused an address")
	}
}
