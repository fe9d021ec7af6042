package outbound

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newClient(tb testing.TB, p Policy, opts ...Option) *Client {
	tb.Helper()
	c, err := New(p, opts...)
	if err != nil {
		tb.Fatalf("New(%+v) = %v", p, err)
	}
	return c
}

// newServer starts an httptest origin on loopback, closed at cleanup.
func newServer(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}

// counter is an origin answering 204 that counts its requests.
type counter struct{ hits atomic.Int32 }

func (o *counter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	o.hits.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// fakeDNS resolves names from a fixed table and counts its lookups. An
// unknown name is NXDOMAIN.
type fakeDNS struct {
	hosts map[string][]netip.Addr
	calls atomic.Int32
}

func newFakeDNS(hosts map[string][]string) *fakeDNS {
	f := &fakeDNS{hosts: map[string][]netip.Addr{}}
	for h, addrs := range hosts {
		f.hosts[h] = []netip.Addr{} // a name with no addresses stays known
		for _, a := range addrs {
			f.hosts[h] = append(f.hosts[h], netip.MustParseAddr(a))
		}
	}
	return f
}

func (f *fakeDNS) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	f.calls.Add(1)
	addrs, ok := f.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// errDialed is what dialLog answers every dial with.
var errDialed = errors.New("test: dial recorded")

// dialLog records the addresses a Client dials and fails each dial with
// errDialed, so a test sees where a call would go without any network.
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (l *dialLog) dial(_ context.Context, _ *net.Dialer, _, address string) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs = append(l.addrs, address)
	return nil, errDialed
}

func (l *dialLog) dialed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.addrs)
}

// local is the policy for calls to httptest servers on loopback.
var local = Policy{AllowHTTP: true, AllowPrivate: true}

func post(tb testing.TB, rawURL string, body io.Reader) *http.Request {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, rawURL, body)
	if err != nil {
		tb.Fatalf("NewRequest(%q) = %v", rawURL, err)
	}
	return req
}

// checkURLTests are the static cases, shared with FuzzCheckURL as seeds.
var checkURLTests = []struct {
	name    string
	p       Policy
	url     string
	refused bool
}{
	// Scheme.
	{"https", Policy{}, "https://hooks.example.com/scale", false},
	{"http refused", Policy{}, "http://hooks.example.com/scale", true},
	{"http with AllowHTTP", Policy{AllowHTTP: true}, "http://hooks.example.com/scale", false},
	{"https with AllowHTTP", Policy{AllowHTTP: true}, "https://hooks.example.com/scale", false},
	{"upper-case scheme", Policy{}, "HTTPS://hooks.example.com/", false},
	{"ftp", Policy{AllowHTTP: true}, "ftp://hooks.example.com/", true},
	{"ws", Policy{AllowHTTP: true}, "ws://hooks.example.com/", true},
	{"file", Policy{AllowPrivate: true}, "file:///etc/passwd", true},
	{"no scheme", Policy{}, "hooks.example.com/scale", true},
	{"scheme-relative", Policy{}, "//hooks.example.com/scale", true},
	{"empty host", Policy{}, "https:///scale", true},
	{"opaque", Policy{}, "https:hooks.example.com", true},
	{"empty", Policy{}, "", true},
	{"unparsable", Policy{}, "https://hooks.example.com/%zz", true},
	{"control character", Policy{}, "https://hooks.example.com/\x00", true},

	// Userinfo.
	{"user and password", Policy{}, "https://user:pass@hooks.example.com/", true},
	{"user", Policy{}, "https://user@hooks.example.com/", true},
	{"empty userinfo", Policy{}, "https://@hooks.example.com/", true},
	{"colon userinfo", Policy{}, "https://:@hooks.example.com/", true},
	{"userinfo before private", Policy{AllowPrivate: true}, "https://u:p@127.0.0.1/", true},

	// Port.
	{"port", Policy{}, "https://hooks.example.com:8443/", false},
	{"port 1", Policy{}, "https://hooks.example.com:1/", false},
	{"port 65535", Policy{}, "https://hooks.example.com:65535/", false},
	{"port 0", Policy{}, "https://hooks.example.com:0/", true},
	{"port 65536", Policy{}, "https://hooks.example.com:65536/", true},
	{"port not a number", Policy{}, "https://hooks.example.com:https/", true},
	{"empty port", Policy{}, "https://hooks.example.com:/", false},

	// Host names.
	{"trailing dot", Policy{}, "https://hooks.example.com./", false},
	{"punycode", Policy{}, "https://xn--bcher-kva.example/", false},
	{"single label", Policy{}, "https://hooks/", false},
	{"unicode", Policy{}, "https://bücher.example/", true},
	{"wildcard", Policy{}, "https://*.example.com/", true},
	{"leading hyphen", Policy{}, "https://-hooks.example.com/", true},
	{"empty label", Policy{}, "https://hooks..example.com/", true},
	{"sub-delims", Policy{}, "https://hooks!.example.com/", true},
	{"decimal IPv4", Policy{}, "https://2130706433/", true},
	{"hex IPv4", Policy{}, "https://0x7f000001/", true},
	{"short IPv4", Policy{}, "https://127.1/", true},
	{"octal IPv4", Policy{}, "https://0177.0.0.1/", true},
	{"localhost", Policy{}, "https://localhost/", true},
	{"localhost trailing dot", Policy{}, "https://LOCALHOST./", true},
	{"sub.localhost", Policy{}, "https://api.localhost:8080/", true},
	{"localhost with AllowPrivate", Policy{AllowPrivate: true}, "https://localhost/", false},
	{"localhost with BlockPrivate", Policy{AllowPrivate: true, BlockPrivate: true}, "https://localhost/", true},
	{"too long", Policy{}, "https://hooks.example.com/" + strings.Repeat("a", maxURLBytes), true},
	{"host too long", Policy{}, "https://" + strings.Repeat("a.", maxHostBytes) + "example.com/", true},

	// IP literals.
	{"public IPv4", Policy{}, "https://8.8.8.8/", false},
	{"public IPv6", Policy{}, "https://[2606:4700:4700::1111]:8443/", false},
	{"mapped public", Policy{}, "https://[::ffff:8.8.8.8]/", false},
	{"private IPv4", Policy{}, "https://10.0.0.1/", true},
	{"private IPv4 with AllowPrivate", Policy{AllowPrivate: true}, "https://10.0.0.1/", false},
	{"metadata", Policy{AllowHTTP: true}, "http://169.254.169.254/latest/meta-data/", true},
	{"mapped metadata", Policy{AllowHTTP: true}, "http://[::ffff:169.254.169.254]/", true},
	{"mapped private", Policy{}, "https://[::ffff:10.0.0.1]/", true},
	{"mapped loopback", Policy{}, "https://[::ffff:127.0.0.1]:443/", true},
	{"bracketed loopback", Policy{}, "https://[::1]:443/", true},
	{"bracketed loopback no port", Policy{}, "https://[::1]/", true},
	{"bracketed loopback with AllowPrivate", Policy{AllowPrivate: true}, "https://[::1]:443/", false},
	{"bracketed IPv4", Policy{}, "https://[127.0.0.1]/", true},
	{"unbalanced bracket", Policy{}, "https://[::1/", true},
	{"zone link-local", Policy{}, "https://[fe80::1%25eth0]/", true},
	{"zone link-local with port", Policy{}, "https://[fe80::1%25eth0]:443/", true},
	{"zone link-local with AllowPrivate", Policy{AllowPrivate: true}, "https://[fe80::1%25eth0]:443/", true},
	{"zone public", Policy{}, "https://[2606:4700:4700::1111%25eth0]/", true},
	{"zone unescaped", Policy{}, "https://[fe80::1%eth0]/", true},
	{"unique-local", Policy{}, "https://[fd00::1]/", true},
	{"NAT64 of public", Policy{}, "https://[64:ff9b::8.8.8.8]/", true},
	{"6to4", Policy{}, "https://[2002:808:808::1]/", true},
	{"Teredo", Policy{}, "https://[2001::1]/", true},
	{"unspecified with AllowPrivate", Policy{AllowPrivate: true}, "https://0.0.0.0/", true},
	{"unspecified IPv6 with AllowPrivate", Policy{AllowPrivate: true}, "https://[::]/", true},
	{"multicast with AllowPrivate", Policy{AllowPrivate: true}, "https://224.0.0.1/", true},
	{"broadcast with AllowPrivate", Policy{AllowPrivate: true}, "https://255.255.255.255/", true},
	{"CGNAT", Policy{}, "https://100.64.0.1/", true},
	{"documentation", Policy{}, "https://192.0.2.10/", true},

	// BlockPrivate.
	{"BlockPrivate private", Policy{AllowPrivate: true, BlockPrivate: true}, "https://10.0.0.1/", true},
	{"BlockPrivate public", Policy{AllowPrivate: true, BlockPrivate: true}, "https://8.8.8.8/", false},
	{"BlockPrivate with allowlist", Policy{AllowPrivate: true, BlockPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, "https://10.0.0.1/", false},

	// Allowlist, by name and by address; names need DNS to meet CIDRs.
	{"allowlist exact", Policy{Allowlist: []string{"hooks.example.com"}}, "https://hooks.example.com/", false},
	{"allowlist exact case and dot", Policy{Allowlist: []string{"hooks.example.com"}}, "https://HOOKS.Example.com./", false},
	{"allowlist exact other", Policy{Allowlist: []string{"hooks.example.com"}}, "https://evil.example.com/", true},
	{"allowlist exact not subdomain", Policy{Allowlist: []string{"hooks.example.com"}}, "https://a.hooks.example.com/", true},
	{"allowlist name vs IP", Policy{Allowlist: []string{"hooks.example.com"}}, "https://8.8.8.8/", true},
	{"allowlist wildcard deep", Policy{Allowlist: []string{"*.example.com"}}, "https://a.b.example.com/", false},
	{"allowlist wildcard apex", Policy{Allowlist: []string{"*.example.com"}}, "https://example.com/", true},
	{"allowlist wildcard suffix trick", Policy{Allowlist: []string{"*.example.com"}}, "https://evilexample.com/", true},
	{"allowlist CIDR", Policy{Allowlist: []string{"8.8.8.0/24"}}, "https://8.8.8.8/", false},
	{"allowlist CIDR other", Policy{Allowlist: []string{"8.8.8.0/24"}}, "https://1.1.1.1/", true},
	{"allowlist CIDR name waits for DNS", Policy{Allowlist: []string{"8.8.8.0/24"}}, "https://hooks.example.com/", false},
	{"allowlist IP mapped", Policy{Allowlist: []string{"8.8.8.8"}}, "https://[::ffff:8.8.8.8]/", false},
	{"allowlist IPv6 CIDR", Policy{Allowlist: []string{"2606:4700::/32"}}, "https://[2606:4700:4700::1111]/", false},
	{"allowlist private without AllowPrivate", Policy{Allowlist: []string{"10.0.0.0/8"}}, "https://10.0.0.1/", true},
	{"allowlist private with AllowPrivate", Policy{AllowPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, "https://10.0.0.1/", false},
	{"allowlist does not lift http", Policy{Allowlist: []string{"hooks.example.com"}}, "http://hooks.example.com/", true},
}

func TestCheckURL(t *testing.T) {
	for _, tt := range checkURLTests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.p)
			err := c.CheckURL(tt.url)
			_, refused := errors.AsType[*RefusedError](err)
			switch {
			case tt.refused && !refused:
				t.Errorf("CheckURL(%q) = %v, want a *RefusedError", tt.url, err)
			case !tt.refused && err != nil:
				t.Errorf("CheckURL(%q) = %v, want nil", tt.url, err)
			}
		})
	}
}

// TestRefusedErrorURL proves a refusal never carries userinfo, path or
// query, which can hold credentials.
func TestRefusedErrorURL(t *testing.T) {
	tests := []struct {
		name string
		url  string
		want string
	}{
		{"userinfo", "https://user:s3cret@hooks.example.com/a?token=s3cret", "https://hooks.example.com:443"},
		{"path and query", "https://10.0.0.1/services/s3cret?token=s3cret#s3cret", "https://10.0.0.1:443"},
		{"scheme", "ftp://hooks.example.com/s3cret", "ftp://hooks.example.com"},
		{"zone", "https://[fe80::1%25eth0]:8443/s3cret", "https://[fe80::1%eth0]:8443"},
		{"unparsable", "https://user:s3cret@hooks.example.com/%zz", ""},
		{"mistyped userinfo", "https://user:s3cret/x", ""},
	}
	c := newClient(t, Policy{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re, ok := errors.AsType[*RefusedError](c.CheckURL(tt.url))
			if !ok {
				t.Fatalf("CheckURL(%q) is not refused", tt.url)
			}
			if re.URL != tt.want {
				t.Errorf("CheckURL(%q).URL = %q, want %q", tt.url, re.URL, tt.want)
			}
			if strings.Contains(re.Error(), "s3cret") {
				t.Errorf("CheckURL(%q) = %q, want no credential in it", tt.url, re.Error())
			}
		})
	}
}

// TestDoDestinations covers where a call is permitted to go: hostnames
// resolving to public, private and mixed sets, IP literals, the
// allowlist and BlockPrivate. Permitted calls show up as the addresses
// dialed, in resolution order at the URL's port, with no network.
func TestDoDestinations(t *testing.T) {
	const name = "hooks.example.com"
	tests := []struct {
		name     string
		p        Policy
		url      string // default "https://hooks.example.com/scale"
		resolved []string
		want     []string // addresses dialed; nil means refused
		noLookup bool     // an IP literal, or refused before resolving
	}{
		{name: "public v4", resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:443"}},
		{name: "public v4 and v6", resolved: []string{"8.8.8.8", "2606:4700:4700::1111"}, want: []string{"8.8.8.8:443", "[2606:4700:4700::1111]:443"}},
		{name: "port from URL", url: "https://hooks.example.com:8443/scale", resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:8443"}},
		{name: "http port", p: Policy{AllowHTTP: true}, url: "http://hooks.example.com/scale", resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:80"}},
		{name: "mapped public dialed as IPv4", resolved: []string{"::ffff:8.8.8.8"}, want: []string{"8.8.8.8:443"}},
		{name: "all private", resolved: []string{"10.0.0.1", "192.168.1.1"}},
		{name: "loopback v6", resolved: []string{"::1"}},
		{name: "metadata", resolved: []string{"169.254.169.254"}},
		{name: "mixed public first", resolved: []string{"8.8.8.8", "10.0.0.1"}},
		{name: "mixed private first", resolved: []string{"127.0.0.1", "8.8.8.8"}},
		{name: "mixed v6", resolved: []string{"2606:4700:4700::1111", "fd00::1"}},
		{name: "mixed mapped private", resolved: []string{"8.8.8.8", "::ffff:10.0.0.1"}},
		{name: "mixed NAT64", resolved: []string{"8.8.8.8", "64:ff9b::a00:1"}},
		{name: "zone", resolved: []string{"fe80::1%eth0"}},
		{name: "zone with AllowPrivate", p: Policy{AllowPrivate: true}, resolved: []string{"fe80::1%eth0"}},
		{name: "mixed with AllowPrivate", p: Policy{AllowPrivate: true}, resolved: []string{"8.8.8.8", "10.0.0.1"}, want: []string{"8.8.8.8:443", "10.0.0.1:443"}},
		{name: "unspecified with AllowPrivate", p: Policy{AllowPrivate: true}, resolved: []string{"10.0.0.1", "0.0.0.0"}},
		{name: "BlockPrivate private", p: Policy{AllowPrivate: true, BlockPrivate: true}, resolved: []string{"10.0.0.1"}},
		{name: "BlockPrivate public", p: Policy{AllowPrivate: true, BlockPrivate: true}, resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:443"}},

		{name: "allowlist exact", p: Policy{Allowlist: []string{name}}, resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:443"}},
		{name: "allowlist wildcard", p: Policy{Allowlist: []string{"*.example.com"}}, resolved: []string{"8.8.8.8"}, want: []string{"8.8.8.8:443"}},
		{name: "allowlist other name", p: Policy{Allowlist: []string{"hooks.example.net"}}, resolved: []string{"8.8.8.8"}, noLookup: true},
		{name: "allowlist CIDR all in", p: Policy{Allowlist: []string{"8.8.8.0/24"}}, resolved: []string{"8.8.8.8", "8.8.8.4"}, want: []string{"8.8.8.8:443", "8.8.8.4:443"}},
		{name: "allowlist CIDR partly out", p: Policy{Allowlist: []string{"8.8.8.0/24"}}, resolved: []string{"8.8.8.8", "1.1.1.1"}},
		{name: "allowlist IP and CIDR", p: Policy{Allowlist: []string{"1.1.1.1", "2606:4700::/32"}}, resolved: []string{"1.1.1.1", "2606:4700:4700::1111"}, want: []string{"1.1.1.1:443", "[2606:4700:4700::1111]:443"}},
		{name: "allowlist name private", p: Policy{Allowlist: []string{name}}, resolved: []string{"10.0.0.1"}},
		{name: "allowlist name private with AllowPrivate", p: Policy{AllowPrivate: true, Allowlist: []string{name}}, resolved: []string{"10.0.0.1"}, want: []string{"10.0.0.1:443"}},
		{name: "allowlist CIDR private", p: Policy{Allowlist: []string{"10.0.0.0/8"}}, resolved: []string{"10.0.0.1"}},
		{name: "allowlist CIDR private with AllowPrivate and BlockPrivate", p: Policy{AllowPrivate: true, BlockPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, resolved: []string{"10.0.0.1"}, want: []string{"10.0.0.1:443"}},

		{name: "literal public", url: "https://8.8.8.8:8443/scale", want: []string{"8.8.8.8:8443"}, noLookup: true},
		{name: "literal bracketed v6", url: "https://[2606:4700:4700::1111]/scale", want: []string{"[2606:4700:4700::1111]:443"}, noLookup: true},
		{name: "literal mapped", url: "https://[::ffff:8.8.8.8]/scale", want: []string{"8.8.8.8:443"}, noLookup: true},
		{name: "literal private", url: "https://10.0.0.1/scale", noLookup: true},
		{name: "literal zone", url: "https://[fe80::1%25eth0]:443/scale", noLookup: true},
		{name: "literal bracketed loopback", url: "https://[::1]:443/scale", noLookup: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS(map[string][]string{name: tt.resolved})
			var log dialLog
			c := newClient(t, tt.p, WithResolverForTest(dns.resolve), WithDialForTest(log.dial))
			u := tt.url
			if u == "" {
				u = "https://" + name + "/scale"
			}
			resp, err := c.Do(t.Context(), post(t, u, nil))
			if resp != nil {
				t.Fatalf("Do(%s) = %d, want an error", u, resp.StatusCode)
			}
			if tt.want == nil {
				if _, ok := errors.AsType[*RefusedError](err); !ok {
					t.Errorf("Do(%s) = %v, want a *RefusedError", u, err)
				}
			} else if !errors.Is(err, errDialed) {
				t.Errorf("Do(%s) = %v, want %v", u, err, errDialed)
			}
			if got := log.dialed(); !slices.Equal(got, tt.want) {
				t.Errorf("Do(%s) dialed %q, want %q", u, got, tt.want)
			}
			wantLookups := int32(1)
			if tt.noLookup {
				wantLookups = 0
			}
			if got := dns.calls.Load(); got != wantLookups {
				t.Errorf("Do(%s) resolved %d times, want %d", u, got, wantLookups)
			}
		})
	}
}

func TestDoResolveErrors(t *testing.T) {
	dns := newFakeDNS(map[string][]string{"empty.example.com": nil})
	c := newClient(t, Policy{}, WithResolverForTest(dns.resolve), WithDialForTest((&dialLog{}).dial))
	t.Run("not found", func(t *testing.T) {
		_, err := c.Do(t.Context(), post(t, "https://missing.example.com/", nil))
		if dnsErr, ok := errors.AsType[*net.DNSError](err); !ok || !dnsErr.IsNotFound {
			t.Errorf("Do(missing) = %v, want a not-found *net.DNSError", err)
		}
	})
	t.Run("no addresses", func(t *testing.T) {
		_, err := c.Do(t.Context(), post(t, "https://empty.example.com/", nil))
		if _, refused := errors.AsType[*RefusedError](err); err == nil || refused {
			t.Errorf("Do(empty) = %v, want an error that is not a refusal", err)
		}
	})
}

// TestDoNoSecondLookup proves a call resolves once and dials what that
// lookup answered, however the name's answers change afterwards.
func TestDoNoSecondLookup(t *testing.T) {
	var calls atomic.Int32
	resolve := func(context.Context, string) ([]netip.Addr, error) {
		if calls.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("8.8.8.8")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	var log dialLog
	c := newClient(t, Policy{}, WithResolverForTest(resolve), WithDialForTest(log.dial))
	_, err := c.Do(t.Context(), post(t, "https://hooks.example.com/", nil))
	if !errors.Is(err, errDialed) {
		t.Fatalf("Do = %v, want %v", err, errDialed)
	}
	if got, want := log.dialed(), []string{"8.8.8.8:443"}; !slices.Equal(got, want) {
		t.Errorf("Do dialed %q, want %q", got, want)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("Do resolved %d times, want 1", got)
	}
}

// TestDoRebinding proves the dialer's Control check judges the address a
// socket really connects to: the name resolves to a public address, the
// connection goes to loopback (as a rebinding resolver or a racing
// record would make it), and the connection is refused before a byte is
// sent. With AllowPrivate the same setup reaches the origin, so the
// refusal is the check's doing.
func TestDoRebinding(t *testing.T) {
	var origin counter
	srv := newServer(t, &origin)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dns := newFakeDNS(map[string][]string{"hooks.example.com": {"93.184.215.14"}})
	tests := []struct {
		name    string
		p       Policy
		target  string // where the socket really connects
		refused bool
	}{
		{"loopback", Policy{AllowHTTP: true}, srv.Listener.Addr().String(), true},
		{"mapped loopback", Policy{AllowHTTP: true}, netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), uint16(port)).String(), true},
		{"loopback with AllowPrivate", local, srv.Listener.Addr().String(), false},
		{"loopback with BlockPrivate", Policy{AllowHTTP: true, AllowPrivate: true, BlockPrivate: true}, srv.Listener.Addr().String(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := origin.hits.Load()
			rebind := func(ctx context.Context, d *net.Dialer, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, tt.target)
			}
			c := newClient(t, tt.p, WithResolverForTest(dns.resolve), WithDialForTest(rebind))
			resp, err := c.Do(t.Context(), post(t, "http://hooks.example.com/scale", nil))
			hits := origin.hits.Load() - before
			if tt.refused {
				if _, ok := errors.AsType[*RefusedError](err); !ok {
					t.Errorf("Do rebound to %s = %v, want a *RefusedError", tt.target, err)
				}
				if hits != 0 {
					t.Errorf("origin got %d requests, want 0", hits)
				}
				return
			}
			if err != nil {
				t.Fatalf("Do rebound to %s = %v, want 204", tt.target, err)
			}
			if resp.StatusCode != http.StatusNoContent || hits != 1 {
				t.Errorf("Do rebound to %s = %d with %d origin hits, want 204 with 1", tt.target, resp.StatusCode, hits)
			}
		})
	}
}

// TestDoDialsNextAddress proves a call falls through to the next checked
// address when one does not connect.
func TestDoDialsNextAddress(t *testing.T) {
	var origin counter
	srv := newServer(t, &origin)
	dns := newFakeDNS(map[string][]string{"hooks.example.com": {"8.8.8.8", "1.1.1.1"}})
	var log dialLog
	dial := func(ctx context.Context, d *net.Dialer, network, address string) (net.Conn, error) {
		if address == "8.8.8.8:80" {
			return log.dial(ctx, d, network, address)
		}
		// The test's own dialer: the fenced one would refuse loopback.
		var plain net.Dialer
		return plain.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	c := newClient(t, Policy{AllowHTTP: true}, WithResolverForTest(dns.resolve), WithDialForTest(dial))
	resp, err := c.Do(t.Context(), post(t, "http://hooks.example.com/scale", nil))
	if err != nil {
		t.Fatalf("Do = %v, want 204", err)
	}
	if resp.StatusCode != http.StatusNoContent || origin.hits.Load() != 1 {
		t.Errorf("Do = %d with %d origin hits, want 204 with 1", resp.StatusCode, origin.hits.Load())
	}
	if got, want := log.dialed(), []string{"8.8.8.8:80"}; !slices.Equal(got, want) {
		t.Errorf("first attempts = %q, want %q", got, want)
	}
}

func TestDoRedirectNotFollowed(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			var target counter
			targetSrv := newServer(t, &target)
			redirector := newServer(t, http.RedirectHandler(targetSrv.URL+"/elsewhere", code))
			c := newClient(t, local)
			resp, err := c.Do(t.Context(), post(t, redirector.URL+"/scale", strings.NewReader(`{}`)))
			if err != nil {
				t.Fatalf("Do = %v, want %d", err, code)
			}
			if resp.StatusCode != code {
				t.Errorf("Do = %d, want %d", resp.StatusCode, code)
			}
			if got, want := resp.Header.Get("Location"), targetSrv.URL+"/elsewhere"; got != want {
				t.Errorf("Do Location = %q, want %q", got, want)
			}
			if n := target.hits.Load(); n != 0 {
				t.Errorf("redirect target got %d requests, want 0", n)
			}
		})
	}
}

// TestDoBodyNeverRead proves Do returns as soon as the header arrives,
// even from a server that streams without end, and hangs up on it.
func TestDoBodyNeverRead(t *testing.T) {
	hungUp := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(hungUp)
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
	}))
	c := newClient(t, local)
	resp, err := c.Do(t.Context(), post(t, srv.URL+"/scale", nil))
	if err != nil {
		t.Fatalf("Do = %v, want 200", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Body != http.NoBody {
		t.Errorf("Do = %d with body %T, want 200 with http.NoBody", resp.StatusCode, resp.Body)
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	select {
	case <-hungUp:
	case <-deadline.C:
		t.Errorf("server still streaming 5s after Do returned, want the connection closed")
	}
}

// TestDoTimeout proves a server that never answers costs the caller no
// more than its context allows.
func TestDoTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	c := newClient(t, local)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	resp, err := c.Do(ctx, post(t, srv.URL+"/scale", nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v, %v, want %v", resp, err, context.DeadlineExceeded)
	}
}

// TestDoDeadline proves every call is bounded by Timeout, and that a
// caller can shorten but not extend it.
func TestDoDeadline(t *testing.T) {
	errStop := errors.New("test: stop at resolution")
	tests := []struct {
		name   string
		parent time.Duration // 0: no deadline
		want   time.Duration // the deadline the call runs under
	}{
		{"no deadline", 0, Timeout},
		{"longer", time.Hour, Timeout},
		{"shorter", time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got time.Time
			resolve := func(ctx context.Context, _ string) ([]netip.Addr, error) {
				got, _ = ctx.Deadline()
				return nil, errStop
			}
			c := newClient(t, Policy{}, WithResolverForTest(resolve))
			start := time.Now()
			ctx := t.Context()
			if tt.parent > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.parent)
				defer cancel()
			}
			_, err := c.Do(ctx, post(t, "https://hooks.example.com/", nil))
			end := time.Now()
			if !errors.Is(err, errStop) {
				t.Fatalf("Do = %v, want %v", err, errStop)
			}
			if got.Before(start.Add(tt.want)) || got.After(end.Add(tt.want)) {
				t.Errorf("Do deadline = now+%v, want now+%v", got.Sub(start), tt.want)
			}
		})
	}
}

// TestDoTLS proves certificates are verified, against the system roots by
// default, and against the URL's host name although the connection goes
// to a resolved address.
func TestDoTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(&counter{})
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig
	dns := newFakeDNS(map[string][]string{
		"example.com":       {"127.0.0.1"}, // in the httptest certificate
		"hooks.example.net": {"127.0.0.1"}, // not in it
	})
	tests := []struct {
		name   string
		host   string
		opts   []Option
		wantOK bool
	}{
		{"system roots", "example.com", nil, false},
		{"test roots", "example.com", []Option{WithTLSConfigForTest(roots)}, true},
		{"wrong name", "hooks.example.net", []Option{WithTLSConfigForTest(roots)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, Policy{AllowPrivate: true}, append(tt.opts, WithResolverForTest(dns.resolve))...)
			u := "https://" + net.JoinHostPort(tt.host, strconv.Itoa(port)) + "/scale"
			resp, err := c.Do(t.Context(), post(t, u, nil))
			if tt.wantOK {
				if err != nil || resp.StatusCode != http.StatusNoContent {
					t.Errorf("Do(%s) = %v, %v, want 204", u, resp, err)
				}
				return
			}
			if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
				t.Errorf("Do(%s) = %v, want a *tls.CertificateVerificationError", u, err)
			}
		})
	}
}

func TestDoHeaderLimit(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		wantOK bool
	}{
		{"32 KiB", 32 << 10, true},
		{"100 KiB", 100 << 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Big", strings.Repeat("a", tt.size))
				w.WriteHeader(http.StatusNoContent)
			}))
			c := newClient(t, local)
			resp, err := c.Do(t.Context(), post(t, srv.URL+"/scale", nil))
			if tt.wantOK {
				if err != nil || resp.StatusCode != http.StatusNoContent {
					t.Errorf("Do with a %s header = %v, %v, want 204", tt.name, resp, err)
				}
				return
			}
			if _, refused := errors.AsType[*RefusedError](err); err == nil || refused {
				t.Errorf("Do with a %s header = %v, %v, want an error that is not a refusal", tt.name, resp, err)
			}
		})
	}
}

// closeRecorder is a request body that records being closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeRecorder) Close() error {
	b.closed.Store(true)
	return nil
}

// TestDoClosesRequestBody proves a refused request's body is closed, as
// http.Client.Do would close it.
func TestDoClosesRequestBody(t *testing.T) {
	dns := newFakeDNS(map[string][]string{"hooks.example.com": {"10.0.0.1"}})
	c := newClient(t, Policy{}, WithResolverForTest(dns.resolve))
	for _, u := range []string{"http://hooks.example.com/", "https://hooks.example.com/"} {
		t.Run(u, func(t *testing.T) {
			body := &closeRecorder{Reader: strings.NewReader(`{}`)}
			_, err := c.Do(t.Context(), post(t, u, body))
			if _, ok := errors.AsType[*RefusedError](err); !ok {
				t.Fatalf("Do(%s) = %v, want a *RefusedError", u, err)
			}
			if !body.closed.Load() {
				t.Errorf("Do(%s) left the request body open", u)
			}
		})
	}
}

// TestDoErrorOmitsCredentials proves a failed call's error names the
// destination but not the path or query, which may hold a secret.
func TestDoErrorOmitsCredentials(t *testing.T) {
	dns := newFakeDNS(map[string][]string{"hooks.example.com": {"8.8.8.8"}})
	c := newClient(t, Policy{}, WithResolverForTest(dns.resolve), WithDialForTest((&dialLog{}).dial))
	_, err := c.Do(t.Context(), post(t, "https://hooks.example.com/services/s3cret?token=s3cret", nil))
	if !errors.Is(err, errDialed) {
		t.Fatalf("Do = %v, want %v", err, errDialed)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Do = %q, want no path or query in it", err)
	}
}

func TestDoNilRequest(t *testing.T) {
	c := newClient(t, Policy{})
	if resp, err := c.Do(t.Context(), nil); err == nil {
		t.Errorf("Do(nil) = %v, nil, want an error", resp)
	}
	if resp, err := c.Do(t.Context(), &http.Request{}); err == nil {
		t.Errorf("Do(no URL) = %v, nil, want an error", resp)
	}
}

// TestTransport pins the settings that make a call bounded: no proxy from
// the environment, no kept-alive connection, a capped response header.
func TestTransport(t *testing.T) {
	c := newClient(t, Policy{})
	tr := c.transport(target{}, nil)
	if tr.Proxy != nil {
		t.Errorf("transport().Proxy is set, want nil (no ambient proxy)")
	}
	if !tr.DisableKeepAlives {
		t.Errorf("transport().DisableKeepAlives = false, want true")
	}
	if tr.MaxResponseHeaderBytes != 64<<10 {
		t.Errorf("transport().MaxResponseHeaderBytes = %d, want %d", tr.MaxResponseHeaderBytes, 64<<10)
	}
}

// FuzzCheckURL proves CheckURL never panics and answers nil or a
// *RefusedError, and that what it permits is an http(s) URL with a host.
func FuzzCheckURL(f *testing.F) {
	for _, tt := range checkURLTests {
		f.Add(tt.url)
	}
	clients := []*Client{
		newClient(f, Policy{}),
		newClient(f, Policy{AllowHTTP: true, AllowPrivate: true}),
		newClient(f, Policy{AllowPrivate: true, BlockPrivate: true}),
		newClient(f, Policy{Allowlist: []string{"*.example.com", "8.8.8.0/24"}}),
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for i, c := range clients {
			err := c.CheckURL(raw)
			if err == nil {
				u, perr := url.Parse(raw)
				if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil {
					t.Fatalf("client %d: CheckURL(%q) = nil for a URL that is not http(s) with a host", i, raw)
				}
				if i == 0 {
					if a, perr := netip.ParseAddr(u.Hostname()); perr == nil {
						if class, _ := classify(a); class != public {
							t.Fatalf("client 0: CheckURL(%q) = nil for a %s address", raw, class)
						}
					}
				}
				continue
			}
			if _, ok := err.(*RefusedError); !ok {
				t.Fatalf("client %d: CheckURL(%q) = %T %v, want a *RefusedError", i, raw, err, err)
			}
		}
	})
}

// TestMetadataFence: link-local and cloud metadata destinations, by
// address (IPv4, IPv4-mapped IPv6, IPv6) and by well-known name (with and
// without a trailing dot), under each policy. Only an allowlist entry of
// the address itself (and of the name, for a metadata name), with
// AllowPrivate, lets a call through.
func TestMetadataFence(t *testing.T) {
	const gce = "metadata.google.internal"
	private := Policy{AllowHTTP: true, AllowPrivate: true}
	withList := func(entries ...string) Policy { p := private; p.Allowlist = entries; return p }
	tests := []struct {
		name string
		p    Policy
		url  string
		want []string // addresses dialed; nil means refused
	}{
		{"guard/metadata/v4/strict", Policy{AllowHTTP: true}, "http://169.254.169.254/latest/meta-data/", nil},
		{"guard/metadata/v4/allow-private", private, "http://169.254.169.254/latest/meta-data/", nil},
		{"guard/metadata/v4/block-private", Policy{AllowHTTP: true, AllowPrivate: true, BlockPrivate: true}, "http://169.254.169.254/", nil},
		{"guard/metadata/v4/allowlist-wide-prefix", withList("169.254.0.0/16"), "http://169.254.169.254/", nil},
		{"guard/metadata/v4/allowlist-everything", withList("0.0.0.0/0"), "http://169.254.169.254/", nil},
		{"guard/metadata/v4/allowlist-exact-without-allow-private", Policy{AllowHTTP: true, Allowlist: []string{"169.254.169.254"}}, "http://169.254.169.254/", nil},
		{"guard/metadata/v4/allowlist-exact", withList("169.254.169.254"), "http://169.254.169.254/", []string{"169.254.169.254:80"}},
		{"guard/metadata/v4/allowlist-exact-as-prefix", withList("169.254.169.254/32"), "http://169.254.169.254/", []string{"169.254.169.254:80"}},
		{"guard/metadata/mapped-v6/allow-private", private, "http://[::ffff:169.254.169.254]/", nil},
		{"guard/metadata/mapped-v6/allowlist-exact", withList("169.254.169.254"), "http://[::ffff:169.254.169.254]/", []string{"169.254.169.254:80"}},
		{"guard/metadata/v4-link-local/allow-private", private, "http://169.254.170.2/v2/credentials", nil},
		{"guard/metadata/v6-metadata/allow-private", private, "http://[fd00:ec2::254]/", nil},
		{"guard/metadata/v6-metadata/allowlist-ula-prefix", withList("fd00::/8"), "http://[fd00:ec2::254]/", nil},
		{"guard/metadata/v6-link-local/allow-private", private, "http://[fe80::1]/", nil},
		{"guard/metadata/alibaba/allowlist-cgnat-prefix", withList("100.64.0.0/10"), "http://100.100.100.200/", nil},
		{"guard/metadata/other-private-still-allowed", private, "http://10.0.0.1/", []string{"10.0.0.1:80"}},
		{"guard/metadata/name/allow-private", private, "http://" + gce + "/computeMetadata/v1/", nil},
		{"guard/metadata/name-trailing-dot/allow-private", private, "http://" + gce + "./computeMetadata/v1/", nil},
		{"guard/metadata/name-upper-case/allow-private", private, "http://METADATA.google.internal/", nil},
		{"guard/metadata/name/allowlist-wildcard-and-address", withList("*.google.internal", "169.254.169.254"), "http://" + gce + "/", nil},
		{"guard/metadata/name/allowlist-name-only", withList(gce), "http://" + gce + "/", nil},
		{"guard/metadata/name/allowlist-name-and-address", withList(gce, "169.254.169.254"), "http://" + gce + "/", []string{"169.254.169.254:80"}},
		{"guard/metadata/name-trailing-dot/allowlist-name-and-address", withList(gce, "169.254.169.254"), "http://" + gce + "./", []string{"169.254.169.254:80"}},
		{"guard/metadata/other-name-resolving-there/allow-private", private, "http://hooks.example.com/", nil},
		{"guard/metadata/other-name-resolving-there/allowlist-name", withList("hooks.example.com"), "http://hooks.example.com/", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dns := newFakeDNS(map[string][]string{
				gce: {"169.254.169.254"}, gce + ".": {"169.254.169.254"}, "METADATA.google.internal": {"169.254.169.254"},
				"hooks.example.com": {"169.254.169.254"},
			})
			var log dialLog
			c := newClient(t, tt.p, WithResolverForTest(dns.resolve), WithDialForTest(log.dial))
			resp, err := c.Do(t.Context(), post(t, tt.url, nil))
			if resp != nil {
				t.Fatalf("Do(%s) = %d, want an error", tt.url, resp.StatusCode)
			}
			if tt.want == nil {
				if _, ok := errors.AsType[*RefusedError](err); !ok {
					t.Errorf("Do(%s) = %v, want a *RefusedError", tt.url, err)
				}
			} else if !errors.Is(err, errDialed) {
				t.Errorf("Do(%s) = %v, want %v", tt.url, err, errDialed)
			}
			if got := log.dialed(); !slices.Equal(got, tt.want) {
				t.Errorf("Do(%s) dialed %q, want %q", tt.url, got, tt.want)
			}
			// The dialer's own check agrees with the pre-flight one.
			if tt.want == nil {
				return
			}
			ap := netip.MustParseAddrPort(tt.want[0])
			if err := c.control("test", "tcp4", ap.String()); err != nil {
				t.Errorf("control(%s) = %v, want nil for a permitted address", ap, err)
			}
		})
	}
}

// TestHTTPClient proves the client HTTPClient returns is fenced like Do:
// a private address is refused under a policy that blocks it, redirects
// are not followed; and that, unlike Do, it returns the body.
func TestHTTPClient(t *testing.T) {
	var hits counter
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		hits.ServeHTTP(httptest.NewRecorder(), r)
		io.WriteString(w, `{"keys":[]}`)
	}))

	blocked := newClient(t, Policy{AllowHTTP: true}).HTTPClient()
	_, err := blocked.Get(srv.URL + "/jwks")
	if _, ok := errors.AsType[*RefusedError](err); !ok {
		t.Fatalf("Get(loopback) under a policy without AllowPrivate = %v, want a *RefusedError", err)
	}
	if n := hits.hits.Load(); n != 0 {
		t.Fatalf("origin got %d requests after a refusal, want 0", n)
	}
	if _, err := blocked.Get("http://10.0.0.1/jwks"); err == nil {
		t.Fatal("Get(10.0.0.1) = nil error, want refused")
	}

	hc := newClient(t, local).HTTPClient()
	resp, err := hc.Get(srv.URL + "/jwks")
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != `{"keys":[]}` {
		t.Fatalf("body = %q, %v; want the origin's", body, err)
	}
	resp, err = hc.Get(srv.URL + "/redirect")
	if err != nil {
		t.Fatalf("Get(redirect) = %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.hits.Load() != 1 {
		t.Fatalf("redirect = %d with %d origin hits, want 302 not followed", resp.StatusCode, hits.hits.Load())
	}
}
