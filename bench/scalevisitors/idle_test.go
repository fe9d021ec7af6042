package main

import (
	"net/netip"
	"testing"
)

func TestSourceFor(t *testing.T) {
	base := netip.MustParseAddr("127.1.0.254")
	for _, tc := range []struct {
		i, per int
		want   string
		ok     bool
	}{
		{0, 10, "127.1.0.254", true},
		{9, 10, "127.1.0.254", true},
		{10, 10, "127.1.0.255", true},
		{20, 10, "127.1.1.0", true}, // carries into the next octet
	} {
		got, ok := sourceFor(base, tc.i, tc.per)
		if ok != tc.ok || got.String() != tc.want {
			t.Errorf("sourceFor(%s, %d, %d) = %s, %v; want %s, %v", base, tc.i, tc.per, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := sourceFor(netip.MustParseAddr("127.255.255.255"), 1, 1); ok {
		t.Errorf("past the end of 127/8: got %s, want none", got)
	}
}
