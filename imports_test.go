package aperio_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	modulePath    = "github.com/aperio-dev/aperio"
	adminPkg      = modulePath + "/internal/control/admin"
	apiclientPkg  = modulePath + "/internal/control/admin/apiclient"
	gatewayPkg    = modulePath + "/internal/server"
	clientMainPkg = modulePath + "/cmd/aperio-client"
)

// moduleImports returns, for every package of the module, the packages its
// non-test files import.
func moduleImports(t testing.TB) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Stderr = new(strings.Builder)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, cmd.Stderr)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		if fields := strings.Fields(line); len(fields) > 0 {
			imports[fields[0]] = fields[1:]
		}
	}
	// The list must be the module's: an empty or wrong one would pass.
	for _, want := range []string{adminPkg, apiclientPkg, gatewayPkg, clientMainPkg, modulePath + "/router", modulePath + "/autoscale", modulePath + "/internal/control/apitype"} {
		if _, ok := imports[want]; !ok {
			t.Fatalf("go list ./... lacks %s: not this module's packages", want)
		}
	}
	return imports
}

// below returns the packages of the module that top depends on, directly
// or not, without top itself.
func below(imports map[string][]string, top string) []string {
	seen := map[string]bool{top: true}
	queue := []string{top}
	var out []string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range imports[p] {
			if _, inModule := imports[q]; inModule && !seen[q] {
				seen[q] = true
				queue = append(queue, q)
				out = append(out, q)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLayersBelowGatewayDoNotImportAdmin fails when a package the gateway
// is built from (router, autoscale, tunnel, store, ...) imports the admin
// API's server or its Go client. They share the API's JSON types and
// constants through package wire; importing admin instead would tie the
// request path to the API's handlers, and admin already imports them.
func TestLayersBelowGatewayDoNotImportAdmin(t *testing.T) {
	imports := moduleImports(t)
	pkgs := below(imports, gatewayPkg)
	for _, want := range []string{modulePath + "/router", modulePath + "/autoscale"} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("packages below the gateway = %v, want %s among them", pkgs, want)
		}
	}
	for _, p := range pkgs {
		if p == adminPkg {
			continue
		}
		for _, forbidden := range []string{adminPkg, apiclientPkg} {
			if slices.Contains(imports[p], forbidden) {
				t.Errorf("%s imports %s; share types and constants through %s/wire instead", p, forbidden, modulePath)
			}
		}
	}
}

// TestOnlyCLIImportsAPIClient fails when a package other than aperio-client
// imports the admin API's Go client: the server's packages, admin included,
// use package wire for the API's types. Tests may still drive the API with
// the client.
func TestOnlyCLIImportsAPIClient(t *testing.T) {
	imports := moduleImports(t)
	var importers []string
	for p, deps := range imports {
		if slices.Contains(deps, apiclientPkg) {
			importers = append(importers, p)
		}
	}
	slices.Sort(importers)
	if want := []string{clientMainPkg}; !slices.Equal(importers, want) {
		t.Errorf("packages importing %s = %v, want %v", apiclientPkg, importers, want)
	}
}

// testOnly are the packages and modules of the end-to-end suite that no
// product binary may link, each with everything under it: its OpenID
// provider and app (test/...), and mockoidc, which signs any ID token
// for anyone who asks.
var testOnly = []string{modulePath + "/test", "github.com/oauth2-proxy/mockoidc"}

// TestProductBinariesDoNotLinkProvider fails when aperio-server or
// aperio-client depends, directly or not, on the suite's test provider
// (test/oidcprovider), anything else under test/, or mockoidc.
func TestProductBinariesDoNotLinkProvider(t *testing.T) {
	// The forbidden package must exist, or the check below passes for
	// nothing after a rename.
	if _, ok := moduleImports(t)[modulePath+"/test/oidcprovider"]; !ok {
		t.Fatalf("go list ./... lacks %s/test/oidcprovider: update testOnly", modulePath)
	}
	for _, bin := range []string{"aperio-server", "aperio-client"} {
		pkg := modulePath + "/cmd/" + bin
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0") // the release build
		cmd.Stderr = new(strings.Builder)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, cmd.Stderr)
		}
		deps := strings.Fields(string(out))
		// The list must be the binary's: an empty or wrong one would pass.
		if !slices.Contains(deps, pkg) || !slices.Contains(deps, modulePath+"/internal/config") {
			t.Fatalf("go list -deps %s lacks itself or %s/internal/config: not its dependencies", pkg, modulePath)
		}
		for _, d := range deps {
			for _, f := range testOnly {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("%s links %s (test-only)", bin, d)
				}
			}
		}
	}
}
