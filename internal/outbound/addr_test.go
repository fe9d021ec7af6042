package outbound

import (
	"errors"
	"net/netip"
	"slices"
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

	// IPv6 embeddings of IPv4: never public (TestEmbeddedIPv4 judges what they carry).
	{"64:ff9b::a00:1", classNAT64, false},   // 64:ff9b::10.0.0.1
	{"64:ff9b::808:808", classNAT64, false}, // 64:ff9b::8.8.8.8
	{"64:ff9b:1::1", classNAT64, false},
	{"2002:a00:1::1", class6to4, false},   // 6to4 of 10.0.0.1
	{"2002:808:808::1", class6to4, false}, // 6to4 of 8.8.8.8
	{"2001::1", classTeredo, false},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", classTeredo, false},
	{"::127.0.0.1", classCompatible, false},
	{"::8.8.8.8", classCompatible, false},
	{"::ffff:0:808:808", classTranslated, false}, // RFC 2765

	// Other IPv6 space that is not public.
	{"100::1", classDiscard, false},
	{"5f00::1", classSRv6, false},
	{"fec0::1", classSiteLocal, false},
	{"4000::1", classNotGlobal, false},

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

// embedForms spell an IPv4 address in every IPv6 form that hands it to a
// translator or relay.
var embedForms = []struct {
	name  string
	spell func(v4 netip.Addr) netip.Addr
}{
	{"NAT64 64:ff9b::/96", func(v4 netip.Addr) netip.Addr { return embed(v4, "64:ff9b::", 12) }},
	{"NAT64 local-use /96 layout", func(v4 netip.Addr) netip.Addr { return embed(v4, "64:ff9b:1::", 12) }},
	{"NAT64 local-use /48 layout", func(v4 netip.Addr) netip.Addr { return embedSplit(v4, "64:ff9b:1::", 6) }},
	{"NAT64 local-use /56 layout", func(v4 netip.Addr) netip.Addr { return embedSplit(v4, "64:ff9b:1::", 7) }},
	{"NAT64 local-use /64 layout", func(v4 netip.Addr) netip.Addr { return embed(v4, "64:ff9b:1:abcd::", 9) }},
	{"6to4 2002::/16", func(v4 netip.Addr) netip.Addr { return embed(v4, "2002::1", 2) }},
	{"IPv4-compatible ::/96", func(v4 netip.Addr) netip.Addr { return embed(v4, "::", 12) }},
	{"IPv4-translated ::ffff:0:0:0/96", func(v4 netip.Addr) netip.Addr { return embed(v4, "::ffff:0:0:0", 12) }},
	{"Teredo 2001::/32", func(v4 netip.Addr) netip.Addr {
		b := v4.As4()
		for i := range b {
			b[i] ^= 0xff // RFC 4380: the client address is stored inverted
		}
		return embed(netip.AddrFrom4(b), "2001:0:4136:e378:8000:63bf::", 12)
	}},
}

// embed writes v4's four bytes into prefix at byte offset at.
func embed(v4 netip.Addr, prefix string, at int) netip.Addr {
	b := netip.MustParseAddr(prefix).As16()
	v := v4.As4()
	copy(b[at:at+4], v[:])
	return netip.AddrFrom16(b)
}

// embedSplit writes v4 from byte offset at, skipping byte 8 (RFC 6052's
// reserved u octet), as the /48 and /56 layouts do.
func embedSplit(v4 netip.Addr, prefix string, at int) netip.Addr {
	b := netip.MustParseAddr(prefix).As16()
	v := v4.As4()
	for i, j := 0, at; i < 4; i, j = i+1, j+1 {
		if j == 8 {
			j++
		}
		b[j] = v[i]
	}
	return netip.AddrFrom16(b)
}

// TestEmbeddedIPv4 (#38, F8): an IPv6 address that carries an IPv4
// address for a translator or relay is judged by that IPv4 address too,
// so the forms the probe used (64:ff9b::a9fe:a9fe, 2002:a9fe:a9fe::,
// ::a9fe:a9fe) and every other one stay refused under AllowPrivate when
// they carry a metadata or link-local address, unless the exact IPv6
// address is allowlisted.
func TestEmbeddedIPv4(t *testing.T) {
	payloads := []struct {
		name      string
		v4        string
		privateOK bool // permitted under AllowPrivate
	}{
		{"metadata", "169.254.169.254", false},
		{"ECS metadata", "169.254.170.2", false},
		{"link-local", "169.254.1.1", false},
		{"Alibaba metadata", "100.100.100.200", false},
		{"loopback", "127.0.0.1", true},
		{"private", "10.0.0.1", true},
		{"public", "8.8.8.8", true},
	}
	for _, f := range embedForms {
		for _, v := range payloads {
			a := f.spell(netip.MustParseAddr(v.v4))
			t.Run(f.name+"/"+v.name, func(t *testing.T) {
				if got := embedded4(a); len(got) == 0 {
					t.Fatalf("embedded4(%s) = none, want %s among them", a, v.v4)
				} else if !slices.ContainsFunc(got, func(c carried) bool { return c.v4.String() == v.v4 }) {
					t.Fatalf("embedded4(%s) = %v, want %s among them", a, got, v.v4)
				}
				if reason := newClient(t, Policy{}).judge(a); reason == "" {
					t.Errorf("strict judge(%s) permits, want refused", a)
				}
				private := newClient(t, Policy{AllowPrivate: true})
				if reason := private.judge(a); (reason == "") != v.privateOK {
					t.Errorf("AllowPrivate judge(%s) = %q, want permitted %v", a, reason, v.privateOK)
				}
				// Only the exact IPv6 address, listed, lets it through; the
				// IPv4 address or a prefix around the form does not.
				for _, list := range [][]string{{v.v4}, {netip.PrefixFrom(a, 16).Masked().String()}} {
					c := newClient(t, Policy{AllowPrivate: true, Allowlist: list})
					if reason := c.judge(a); (reason == "") != v.privateOK {
						t.Errorf("AllowPrivate+allowlist %v judge(%s) = %q, want permitted %v", list, a, reason, v.privateOK)
					}
				}
				exact := newClient(t, Policy{AllowPrivate: true, Allowlist: []string{a.String()}})
				if reason := exact.judge(a); reason != "" {
					t.Errorf("AllowPrivate+allowlist [%s] judge(%s) = %q, want permitted", a, a, reason)
				}
			})
		}
	}
	// The probe's URLs, refused at creation as webhooks are.
	c := newClient(t, Policy{AllowHTTP: true, AllowPrivate: true})
	for _, u := range []string{"http://[64:ff9b::a9fe:a9fe]/", "http://[2002:a9fe:a9fe::]/", "http://[::a9fe:a9fe]/", "http://[::ffff:0:a9fe:a9fe]/"} {
		err := c.CheckURL(u)
		if _, ok := errors.AsType[*RefusedError](err); !ok {
			t.Errorf("CheckURL(%s) = %v, want a *RefusedError", u, err)
		}
	}
	// Never-class IPv4 addresses stay refused in an unambiguous form.
	for _, s := range []string{"64:ff9b::ffff:ffff", "2002:e000:1::", "::ffff:0:0:0"} {
		if reason := c.judge(netip.MustParseAddr(s)); reason == "" {
			t.Errorf("AllowPrivate judge(%s) permits, want refused", s)
		}
	}
	// ::1 and :: are loopback and unspecified, not embeddings.
	if reason := c.judge(netip.IPv6Loopback()); reason != "" {
		t.Errorf("AllowPrivate judge(::1) = %q, want permitted", reason)
	}
}
