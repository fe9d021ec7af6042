package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// loadClientFile loads file as aperio.yaml, with files as its includes.
func loadClientFile(t *testing.T, file string, files map[string]string) (Client, *Sources, error) {
	t.Helper()
	all := map[string]string{ClientFile: file}
	for k, v := range files {
		all[k] = v
	}
	return LoadClient(ClientOptions{
		Env:      envOf(nil),
		Hostname: func() (string, error) { return "h", nil },
		ReadFile: filesOf(all),
	})
}

const exposeHead = "server:\n  url: https://tunnel.example.com\n  token: apr_x\n"

// TestExposeLoaded checks every key of an expose entry, the defaults
// (protocol tcp, a bare port on 127.0.0.1, generated names) and that a
// client with ports and no service is valid.
func TestExposeLoaded(t *testing.T) {
	c, src, err := loadClientFile(t, exposeHead+`expose:
  - target: 22
    remote_port: 2222
    allowed_ips: [203.0.113.0/24, 2001:db8::1]
    proxy_protocol: v2
  - protocol: UDP
    target: dns.internal:53
  - name: game
    protocol: udp
    target: "[::1]:27015"
    remote_port: 27015
  - target: 5432
`, nil)
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	if len(c.Services) != 0 {
		t.Fatalf("services = %v, want none", c.Services)
	}
	want := []Expose{
		{Expose: tunnel.Expose{Name: "tcp-2222", Protocol: "tcp", RemotePort: 2222, AllowedIPs: []string{"203.0.113.0/24", "2001:db8::1"}}, Target: "127.0.0.1:22", ProxyProtocol: "v2"},
		{Expose: tunnel.Expose{Name: "udp-auto-1", Protocol: "udp"}, Target: "dns.internal:53"},
		{Expose: tunnel.Expose{Name: "game", Protocol: "udp", RemotePort: 27015}, Target: "[::1]:27015"},
		{Expose: tunnel.Expose{Name: "tcp-auto-2", Protocol: "tcp"}, Target: "127.0.0.1:5432"},
	}
	if len(c.Expose) != len(want) {
		t.Fatalf("expose = %+v", c.Expose)
	}
	for i := range want {
		g, w := c.Expose[i], want[i]
		if g.Name != w.Name || g.Protocol != w.Protocol || g.Target != w.Target || g.RemotePort != w.RemotePort || !slices.Equal(g.AllowedIPs, w.AllowedIPs) || g.ProxyProtocol != w.ProxyProtocol {
			t.Errorf("expose[%d] = %+v, want %+v", i, g, w)
		}
	}
	p := printedClient(t, c, src)
	if got := p["expose[0].target"]; !strings.HasPrefix(got, "expose[0].target = 127.0.0.1:22  # file:aperio.yaml:") {
		t.Errorf("printed expose[0].target = %q", got)
	}
	if got := p["expose[3].name"]; !strings.HasPrefix(got, "expose[3].name = tcp-auto-2  # default") {
		t.Errorf("printed expose[3].name = %q", got)
	}
}

// TestExposeIncludesConcatenate checks that the expose lists of a file
// and its include add up, as services: do.
func TestExposeIncludesConcatenate(t *testing.T) {
	c, _, err := loadClientFile(t, exposeHead+"include: [more.yaml]\nexpose:\n  - {target: 22, remote_port: 2222}\n",
		map[string]string{"more.yaml": "expose:\n  - {target: 80, remote_port: 8080}\n"})
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	var names []string
	for _, e := range c.Expose {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"tcp-8080", "tcp-2222"}) {
		t.Fatalf("names = %v, want the include's first", names)
	}
}

// TestExposeHostile checks that every bad entry is refused with the key
// and the reason, and nothing panics.
func TestExposeHostile(t *testing.T) {
	many := "expose:\n" + strings.Repeat("  - {target: 22}\n", tunnel.MaxExpose+1)
	for _, tc := range []struct {
		name, body string
		want       string
	}{
		{"no target", "expose:\n  - remote_port: 22\n", "expose[0].target: required"},
		{"url target", "expose:\n  - target: http://localhost:22\n", `expose[0].target (aperio.yaml:5): "http://localhost:22" is not a port or host:port`},
		{"port zero", "expose:\n  - target: \"localhost:0\"\n", `"localhost:0" is not a port or host:port`},
		{"port too big", "expose:\n  - target: \"localhost:70000\"\n", `"localhost:70000" is not a port or host:port`},
		{"control host", "expose:\n  - target: \"a\\tb:22\"\n", "control characters"},
		{"protocol", "expose:\n  - {target: 22, protocol: sctp}\n", `expose[0].protocol (aperio.yaml:5): "sctp" is not tcp or udp`},
		{"remote port", "expose:\n  - {target: 22, remote_port: 65536}\n", "must be within 0..65535"},
		{"negative port", "expose:\n  - {target: 22, remote_port: -1}\n", "must be within 0..65535"},
		{"same port", "expose:\n  - {target: 22, remote_port: 2222}\n  - {target: 23, remote_port: 2222, name: b}\n", "tcp port 2222 is already asked for by expose[0]"},
		{"same name", "expose:\n  - {target: 22, name: a}\n  - {target: 23, name: a}\n", `"a" is already the name of expose[0]`},
		{"long name", "expose:\n  - {target: 22, name: " + strings.Repeat("n", 64) + "}\n", "longer than 63 bytes"},
		{"space name", "expose:\n  - {target: 22, name: \"a b\"}\n", "spaces or control characters"},
		{"bad ip", "expose:\n  - {target: 22, allowed_ips: [not-an-ip]}\n", `"not-an-ip" is neither an address nor a CIDR prefix`},
		{"proxy v1", "expose:\n  - {target: 22, proxy_protocol: v1}\n", `"v1" is not v2`},
		{"proxy udp", "expose:\n  - {target: 53, protocol: udp, proxy_protocol: v2}\n", "applies to tcp entries only"},
		{"not a list", "expose: {target: 22}\n", "expected a list of expose"},
		{"entry not a mapping", "expose:\n  - 22\n", "expected a mapping of port settings"},
		{"unknown key", "expose:\n  - {target: 22, remote: 1}\n", "expose[0].remote"},
		{"too many", many, "entries, at most 64"},
		// The server refuses an announcement past 64 (tunnel.CheckExpose):
		// the loader says so first, instead of a client refused at connect.
		{"too many ips", "expose:\n  - {target: 22, allowed_ips: [" + strings.TrimSuffix(strings.Repeat("10.0.0.1, ", 65), ", ") + "]}\n", "expose[0].allowed_ips (aperio.yaml:5): 65 entries, at most 64"},
		{"control name", "expose:\n  - {target: 22, name: \"a\\x7fb\"}\n", "spaces or control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantLoadError(t, exposeHead+tc.body, tc.want) })
	}
}

// TestStaticLoaded checks the keys of a serve: service: resolved against
// the file's directory, no target needed, never probed even when the
// client's health asks for probes.
func TestStaticLoaded(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "public"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "aperio.yaml")
	body := exposeHead + "health:\n  endpoint: /healthz\nservices:\n  - serve: ./public\n    hostname: site.example.com\n    spa: true\n    index: home.html\n    directory_listing: true\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := LoadClient(ClientOptions{File: file, FileMustExist: true, Env: envOf(nil), Hostname: func() (string, error) { return "h", nil }})
	if err != nil {
		t.Fatalf("LoadClient: %v", err)
	}
	s := c.Services[0]
	if s.Serve != filepath.Join(dir, "public") || !s.SPA || s.ServeIndex() != "home.html" || !s.DirectoryListing {
		t.Fatalf("service = serve %q spa %v index %q listing %v", s.Serve, s.SPA, s.ServeIndex(), s.DirectoryListing)
	}
	if s.Probed() {
		t.Fatal("a serve: service is probed")
	}
	if (Service{Health: s.Health}).Probed() != true {
		t.Fatal("a target service with health.endpoint is not probed")
	}
}

// TestStaticHostile checks the refusals of serve:, index and
// tls_passthrough.
func TestStaticHostile(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	svc := "services:\n  - hostname: a.example.com\n"
	for _, tc := range []struct {
		name, body string
		want       string
	}{
		{"both", svc + "    serve: " + dir + "\n    target: 3000\n", "cannot be combined with target"},
		{"missing dir", svc + "    serve: " + filepath.Join(dir, "nope") + "\n", "no such file or directory"},
		{"not a dir", svc + "    serve: " + notDir + "\n", "is not a directory"},
		{"index path", svc + "    serve: " + dir + "\n    index: ../secret\n", `"../secret" is not a file name`},
		{"index dots", svc + "    serve: " + dir + "\n    index: ..\n", `".." is not a file name`},
		{"spa without serve", svc + "    target: 3000\n    spa: true\n", "services[0].spa (aperio.yaml:7): applies to a serve: service only"},
		{"listing without serve", svc + "    target: 3000\n    directory_listing: true\n", "applies to a serve: service only"},
		{"passthrough path", svc + "    target: 8443\n    tls_passthrough: true\n    path: /x\n", "cannot be combined with path"},
		{"passthrough serve", svc + "    serve: " + dir + "\n    tls_passthrough: true\n", "services[0].tls_passthrough (aperio.yaml:7): cannot be combined with serve"},
		{"passthrough unix", svc + "    target: unix:///run/app.sock\n    tls_passthrough: true\n", "needs a TCP target"},
		{"passthrough auth", svc + "    target: 8443\n    tls_passthrough: true\n    auth:\n      bearer:\n        keys:\n          ci: " + strings.Repeat("0f", 32) + "\n", "cannot be combined with auth"},
		{"top-level serve", "serve: " + dir + "\n", "serve is a per-service setting"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantLoadError(t, exposeHead+tc.body, tc.want) })
	}
}

// wantLoadError fails the test unless loading file fails with an error
// that holds want.
func wantLoadError(t *testing.T, file, want string) {
	t.Helper()
	_, _, err := loadClientFile(t, file, nil)
	if err == nil {
		t.Fatalf("LoadClient accepted %q", file)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v\nwant it to contain %q", err, want)
	}
}
