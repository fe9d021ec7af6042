package outbound

import (
	"net/netip"
	"testing"
)

// classifyTests covers every range the fence refuses, in IPv4 and IPv6
// forms (IPv4-mapped IPv6 included), with boundary addresses on both
// sides where a range is carved out of public space.
var classifyTests = []struct {
	addr  string
	class string
	never bool
}{
	// Unspecified, in every spelling.
	{"0.0.0.0", classUnspecified, true},
	{"0.1.2.3", classUnspecified, true},
	{"0.255.255.255", classUnspecified, true},
	{"::", classUnspecified, true},
	{"::ffff:0.0.0.0", classUnspecified, true},

	// Loopback.
	{"127.0.0.1", classLoopback, false},
	{"127.255.255.254", classLoopback, false},
	{"::1", classLoopback, false},
	{"::ffff:127.0.0.1", classLoopback, false},

	// Private (RFC 1918) and unique-local.
	{"10.0.0.1", classPrivate, false},
	{"10.255.255.255", classPrivate, false},
	{"172.16.0.1", classPrivate, false},
	{"172.31.255.254", classPrivate, false},
	{"192.168.0.1", classPrivate, false},
	{"192.168.255.255", classPrivate, false},
	{"::ffff:10.0.0.1", classPrivate, false},
	{"::ffff:172.16.0.1", classPrivate, false},
	{"::ffff:192.168.1.1", classPrivate, false},
	{"fc00::1", classUniqueLocal, false},
	{"fd12:3456:789a::1", classUniqueLocal, false},

	// Link-local, the cloud metadata address included.
	{"169.254.169.254", classMetadata, false},
	{"::ffff:169.254.169.254", classMetadata, false},
	{"169.254.0.1", classLinkLocal, false},
	{"169.254.255.254", classLinkLocal, false},
	{"fe80::1", classLinkLocal, false},
	{"fe80::1%eth0", classLinkLocal, false},
	{"febf:ffff::1", classLinkLocal, false},

	// Carrier-grade NAT.
	{"100.64.0.1", classCGNAT, false},
	{"100.127.255.254", classCGNAT, false},
	{"::ffff:100.64.0.1", classCGNAT, false},

	// Multicast and broadcast.
	{"224.0.0.1", classMulticast, true},
	{"239.255.255.250", classMulticast, true},
	{"::ffff:224.0.0.1", classMulticast, true},
	{"ff02::1", classMulticast, true},
	{"ff0e::1", classMulticast, true},
	{"255.255.255.255", classBroadcast, true},
	{"::ffff:255.255.255.255", classBroadcast, true},

	// Benchmarking.
	{"198.18.0.1", classBenchmark, false},
	{"198.19.255.254", classBenchmark, false},
	{"2001:2::1", classIETF, false},

	// Documentation.
	{"192.0.2.1", classDoc, false},
	{"198.51.100.1", classDoc, false},
	{"203.0.113.1", classDoc, false},
	{"::ffff:192.0.2.1", classDoc, false},
	{"2001:db8::1", classDoc, false},
	{"2001:db8:ffff::1", classDoc, false},
	{"3fff::1", classDoc, false},

	// IETF protocol assignments, reserved, relay anycast.
	{"192.0.0.1", classIETF, false},
	{"192.0.0.170", classIETF, false},
	{"240.0.0.1", classReserved, false},
	{"255.255.255.254", classReserved, false},
	{"::ffff:240.0.0.1", classReserved, false},
	{"192.88.99.1", class6to4Relay, false},

	// IPv6 embeddings of IPv4, refused whatever they carry.
	{"64:ff9b::a00:1", classNAT64, false},   // 64:ff9b::10.0.0.1
	{"64:ff9b::808:808", classNAT64, false}, // 64:ff9b::8.8.8.8
	{"64:ff9b:1::1", classNAT64, false},
	{"2002:a00:1::1", class6to4, false},   // 6to4 of 10.0.0.1
	{"2002:808:808::1", class6to4, false}, // 6to4 of 8.8.8.8
	{"2001::1", classTeredo, false},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", classTeredo, false},
	{"::127.0.0.1", classCompatible, false},
	{"::8.8.8.8", classCompatible, false},

	// Other IPv6 space that is not public.
	{"100::1", classDiscard, false},
	{"5f00::1", classSRv6, false},
	{"fec0::1", classSiteLocal, false},
	{"4000::1", classNotGlobal, false},
	{"::ffff:0:808:808", classNotGlobal, false}, // IPv4-translated, RFC 2765

	// Zones make any address scoped.
	{"2606:4700:4700::1111%eth0", classZoned, false},

	// Public, including the edges of the ranges above.
	{"8.8.8.8", public, false},
	{"1.1.1.1", public, false},
	{"::ffff:8.8.8.8", public, false},
	{"9.255.255.255", public, false},
	{"11.0.0.0", public, false},
	{"100.63.255.255", public, false},
	{"100.128.0.0", public, false},
	{"126.255.255.255", public, false},
	{"128.0.0.0", public, false},
	{"169.253.255.255", public, false},
	{"169.255.0.0", public, false},
	{"172.15.255.255", public, false},
	{"172.32.0.0", public, false},
	{"192.0.1.255", public, false},
	{"192.0.3.0", public, false},
	{"192.167.255.255", public, false},
	{"192.169.0.0", public, false},
	{"198.17.255.255", public, false},
	{"198.20.0.0", public, false},
	{"223.255.255.255", public, false},
	{"2606:4700:4700::1111", public, false},
	{"2001:4860:4860::8888", public, false},
	{"2001:200::1", public, false},      // just past 2001::/23
	{"2001:db7:ffff::1", public, false}, // just before 2001:db8::/32
	{"2003::1", public, false},
	{"3ffe:ffff::1", public, false},
}

func TestClassify(t *testing.T) {
	for _, tt := range classifyTests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			class, never := classify(a)
			if class != tt.class || never != tt.never {
				t.Errorf("classify(%s) = %q, %v, want %q, %v", tt.addr, class, never, tt.class, tt.never)
			}
		})
	}
}

func TestClassifyInvalid(t *testing.T) {
	class, never := classify(netip.Addr{})
	if class != classInvalid || !never {
		t.Errorf("classify(zero Addr) = %q, %v, want %q, true", class, never, classInvalid)
	}
}

// TestJudge proves how the policy treats each class: AllowPrivate permits
// every non-public class except the never ones, and BlockPrivate takes
// that back when there is no allowlist.
func TestJudge(t *testing.T) {
	policies := []struct {
		name        string
		p           Policy
		privateOK   bool // permits 10.0.0.1, ::1, 64:ff9b::808:808
		neverStayed bool // still refuses 0.0.0.0, ::, 224.0.0.1, 255.255.255.255
	}{
		{"strict", Policy{}, false, true},
		{"AllowPrivate", Policy{AllowPrivate: true}, true, true},
		{"AllowPrivate+BlockPrivate", Policy{AllowPrivate: true, BlockPrivate: true}, false, true},
		{"AllowPrivate+BlockPrivate+Allowlist", Policy{AllowPrivate: true, BlockPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, true, true},
		{"BlockPrivate", Policy{BlockPrivate: true}, false, true},
	}
	for _, pt := range policies {
		t.Run(pt.name, func(t *testing.T) {
			c := newClient(t, pt.p)
			for _, s := range []string{"10.0.0.1", "::1", "64:ff9b::808:808"} {
				if got := c.judge(netip.MustParseAddr(s)) == ""; got != pt.privateOK {
					t.Errorf("judge(%s) permits = %v, want %v", s, got, pt.privateOK)
				}
			}
			for _, s := range []string{"0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255"} {
				if got := c.judge(netip.MustParseAddr(s)) != ""; got != pt.neverStayed {
					t.Errorf("judge(%s) refuses = %v, want %v", s, got, pt.neverStayed)
				}
			}
			// Link-local and metadata addresses stay refused under every
			// policy without an exact allowlist entry.
			for _, s := range []string{"fe80::1%eth0", "169.254.169.254", "169.254.1.1", "::ffff:169.254.169.254", "fd00:ec2::254"} {
				if reason := c.judge(netip.MustParseAddr(s)); reason == "" {
					t.Errorf("judge(%s) permits, want it refused", s)
				}
			}
			if reason := c.judge(netip.MustParseAddr("8.8.8.8")); reason != "" {
				t.Errorf("judge(8.8.8.8) = %q, want \"\"", reason)
			}
		})
	}
}
