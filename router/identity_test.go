package router

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestEdgeResolve(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name     string
		header   string // real_ip_header; "" is X-Forwarded-For
		peer     string
		in       http.Header
		addr     string // resolved visitor
		xff      string // X-Forwarded-For the backend sees
		proto    string
		remote   string // RemoteAddr after Resolve
		keepID   bool   // the inbound X-Request-Id survives
		realGone bool   // the real-ip header is removed
	}{
		{name: "untrusted peer: headers ignored", peer: "203.0.113.7:1000",
			in:   http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Forwarded-Proto": {"https"}, "X-Request-Id": {"abc"}},
			addr: "203.0.113.7", xff: "203.0.113.7", proto: "http", remote: "203.0.113.7:1000"},
		{name: "trusted peer, no header", peer: "10.0.0.1:1000",
			addr: "10.0.0.1", xff: "10.0.0.1", proto: "http", remote: "10.0.0.1:1000"},
		{name: "trusted peer names the visitor", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Forwarded-Proto": {"https"}, "X-Request-Id": {"abc-1"}},
			addr: "198.51.100.1", xff: "198.51.100.1, 10.0.0.1", proto: "https", remote: "198.51.100.1:0", keepID: true},
		{name: "rightmost untrusted wins over a spoofed left entry", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1, 10.0.0.9"}},
			addr: "198.51.100.1", xff: "198.51.100.1, 10.0.0.9, 10.0.0.1", proto: "http", remote: "198.51.100.1:0"},
		{name: "several header lines", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1", "10.0.0.9"}},
			addr: "198.51.100.1", xff: "198.51.100.1, 10.0.0.9, 10.0.0.1", proto: "http", remote: "198.51.100.1:0"},
		{name: "garbage ends the walk at the last trusted hop", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Forwarded-For": {"198.51.100.1, evil, 10.0.0.9"}},
			addr: "10.0.0.9", xff: "10.0.0.9, 10.0.0.1", proto: "http", remote: "10.0.0.9:0"},
		{name: "mapped and v6 peers", peer: "[fd00::1]:1000",
			in:   http.Header{"X-Forwarded-For": {"::ffff:198.51.100.1"}},
			addr: "198.51.100.1", xff: "::ffff:198.51.100.1, fd00::1", proto: "http", remote: "198.51.100.1:0"},
		{name: "X-Real-IP from a trusted peer", header: "X-Real-IP", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Real-Ip": {"198.51.100.1"}, "X-Forwarded-For": {"1.1.1.1"}},
			addr: "198.51.100.1", xff: "198.51.100.1, 10.0.0.1", proto: "http", remote: "198.51.100.1:0"},
		{name: "CF-Connecting-IP from an untrusted peer", header: "CF-Connecting-IP", peer: "203.0.113.7:1000",
			in:   http.Header{"Cf-Connecting-Ip": {"198.51.100.1"}},
			addr: "203.0.113.7", xff: "203.0.113.7", proto: "http", remote: "203.0.113.7:1000", realGone: true},
		{name: "bad request id from a trusted peer is replaced", peer: "10.0.0.1:1000",
			in:   http.Header{"X-Request-Id": {"a b"}},
			addr: "10.0.0.1", xff: "10.0.0.1", proto: "http", remote: "10.0.0.1:1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEdge(trusted, tc.header)
			req := httptest.NewRequest("GET", "http://app.test/", nil)
			req.RemoteAddr = tc.peer
			for k, vv := range tc.in {
				req.Header[k] = vv
			}
			inID := req.Header.Get(HeaderRequestID)
			req = e.Resolve(req)
			v := VisitorOf(req)
			if got := v.Addr.String(); got != tc.addr {
				t.Errorf("Resolve: visitor = %s, want %s", got, tc.addr)
			}
			if req.RemoteAddr != tc.remote {
				t.Errorf("Resolve: RemoteAddr = %s, want %s", req.RemoteAddr, tc.remote)
			}
			if v.Proto != tc.proto {
				t.Errorf("Resolve: proto = %s, want %s", v.Proto, tc.proto)
			}
			id := req.Header.Get(HeaderRequestID)
			if id != v.RequestID || (id == inID) != tc.keepID || id == "" {
				t.Errorf("Resolve: request id %q (visitor %q, inbound %q), want kept %v", id, v.RequestID, inID, tc.keepID)
			}
			if tc.realGone && req.Header.Get(tc.header) != "" {
				t.Errorf("Resolve left %s = %q from an untrusted peer", tc.header, req.Header.Get(tc.header))
			}
			prepareOutbound(req, &v, false, underscoreAllow)
			if got := req.Header.Get("X-Forwarded-For"); got != tc.xff {
				t.Errorf("outbound X-Forwarded-For = %q, want %q", got, tc.xff)
			}
			if got := req.Header.Get("X-Forwarded-Proto"); got != tc.proto {
				t.Errorf("outbound X-Forwarded-Proto = %q, want %q", got, tc.proto)
			}
		})
	}
}

func TestEdgeHopBound(t *testing.T) {
	e := NewEdge([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "")
	req := httptest.NewRequest("GET", "http://app.test/", nil)
	req.RemoteAddr = "10.0.0.1:1"
	req.Header.Set("X-Forwarded-For", "198.51.100.1, "+strings.Repeat("10.0.0.2, ", 100)+"10.0.0.3")
	v := VisitorOf(e.Resolve(req))
	if !e.Trusts(v.Addr) {
		t.Errorf("Resolve past %d hops = %s, want the last trusted hop examined", maxForwardedHops, v.Addr)
	}
}

func TestRequestIDsAreUnique(t *testing.T) {
	e := NewEdge(nil, "")
	seen := make(map[string]bool)
	for range 1000 {
		id := e.newRequestID()
		if seen[id] || !validRequestID(id) {
			t.Fatalf("newRequestID() = %q: repeated or invalid", id)
		}
		seen[id] = true
	}
}

// FuzzEdgeResolve feeds hostile forwarding headers from a trusted and an
// untrusted peer: Resolve must not panic, must never let an untrusted
// peer choose the visitor, must hand on only a valid request id, and the
// X-Forwarded-For it builds must end with the peer and hold no line break.
func FuzzEdgeResolve(f *testing.F) {
	f.Add("10.0.0.1:1000", "1.1.1.1, 198.51.100.1, 10.0.0.9", "https", "abc-1", false)
	f.Add("203.0.113.7:1000", "198.51.100.1", "https", "x", false)
	f.Add("[fd00::1]:1", "::ffff:198.51.100.1,,  ,10.0.0.2", "HTTP", "", true)
	f.Add("10.0.0.1:1", strings.Repeat("10.0.0.2,", 40), "", strings.Repeat("a", 200), false)
	f.Add("10.0.0.1:1", "fe80::1%eth0, 198.51.100.1", "ftp", "a b", true)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	edges := [2]*Edge{NewEdge(trusted, ""), NewEdge(trusted, "X-Real-IP")}
	f.Fuzz(func(t *testing.T, peer, xff, proto, id string, realIP bool) {
		e := edges[0]
		if realIP {
			e = edges[1]
		}
		req := httptest.NewRequest("GET", "http://app.test/", nil)
		req.RemoteAddr = peer
		req.Header["X-Forwarded-For"] = []string{xff}
		req.Header["X-Real-Ip"] = []string{xff}
		req.Header["X-Forwarded-Proto"] = []string{proto}
		req.Header["X-Request-Id"] = []string{id}
		req = e.Resolve(req)
		v := VisitorOf(req)
		if !v.Trusted && v.Addr != v.Peer {
			t.Fatalf("untrusted peer %q chose visitor %s", peer, v.Addr)
		}
		if !validRequestID(v.RequestID) || req.Header.Get(HeaderRequestID) != v.RequestID {
			t.Fatalf("request id %q (header %q) is not a valid one", v.RequestID, req.Header.Get(HeaderRequestID))
		}
		if v.Proto != "http" && v.Proto != "https" {
			t.Fatalf("proto %q", v.Proto)
		}
		prepareOutbound(req, &v, false, underscoreAllow)
		out := req.Header.Get("X-Forwarded-For")
		if v.Peer.IsValid() && !strings.HasSuffix(out, v.Peer.String()) || strings.ContainsAny(out, "\r\n") {
			t.Fatalf("outbound X-Forwarded-For %q: want it to end with peer %s and hold no line break", out, v.Peer)
		}
	})
}

func BenchmarkEdgeResolve(b *testing.B) {
	e := NewEdge([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, "")
	for _, tc := range []struct{ name, peer, xff string }{
		{"untrusted", "203.0.113.7:1000", ""},
		{"trusted-proxy", "10.0.0.1:1000", "198.51.100.1, 10.0.0.9"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "http://app.test/", nil)
			req.RemoteAddr = tc.peer
			b.ReportAllocs()
			for b.Loop() {
				req.Header = http.Header{}
				if tc.xff != "" {
					req.Header["X-Forwarded-For"] = []string{tc.xff}
				}
				r := e.Resolve(req)
				v := VisitorOf(r)
				prepareOutbound(r, &v, false, underscoreAllow)
			}
		})
	}
}

// TestEdgeResolveAllocs pins what resolving a visitor costs: the visitor
// context, the request's copy and the request id, whose X-Request-Id
// value shares the context's allocation (#43; four before).
func TestEdgeResolveAllocs(t *testing.T) {
	e := NewEdge(nil, "")
	req := httptest.NewRequest("GET", "http://app.test/", nil)
	req.RemoteAddr = "203.0.113.7:1000"
	var id string
	allocs := testing.AllocsPerRun(100, func() {
		id = VisitorOf(e.Resolve(req)).RequestID
	})
	if got := req.Header.Get(HeaderRequestID); got != id || id == "" {
		t.Fatalf("X-Request-Id = %q, want the visitor's id %q", got, id)
	}
	if allocs > 3 {
		t.Errorf("Resolve: %v allocations per request, want at most 3", allocs)
	}
}
