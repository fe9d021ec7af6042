package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// serverOnly are the packages and modules aperio-client must not link, each
// with everything under it: the server's packages, and the heavy libraries
// only they need (SQLite, PostgreSQL, the OpenTelemetry SDK and exporters,
// Prometheus, protobuf). Linking any of them makes the client's binary
// several times bigger and its idle memory twice as high, since the Go
// runtime touches the pages of every package's data at start.
var serverOnly = []string{
	"github.com/aperio-dev/aperio/internal/visitor/access",
	"github.com/aperio-dev/aperio/internal/control/admin",
	"github.com/aperio-dev/aperio/autoscale",
	"github.com/aperio-dev/aperio/internal/visitor/stale",
	"github.com/aperio-dev/aperio/internal/server",
	"github.com/aperio-dev/aperio/migrations",
	"github.com/aperio-dev/aperio/router",
	"github.com/aperio-dev/aperio/store",
	"github.com/aperio-dev/aperio/internal/telemetry",
	"github.com/aperio-dev/aperio/internal/control/webhook",
	"modernc.org/sqlite",
	"github.com/coreos/go-oidc",
	"golang.org/x/oauth2",
	"github.com/go-jose",
	"github.com/jackc/pgx/v5",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"github.com/prometheus",
	"google.golang.org/protobuf",
	"google.golang.org/grpc",
}

// clientSide are the packages under serverOnly entries that the client may
// link: the admin API's Go client imports only the standard library and
// wire, which is outside serverOnly.
var clientSide = []string{"github.com/aperio-dev/aperio/internal/control/admin/apiclient"}

// serverOnlyEntry returns the entry of serverOnly the package at path
// falls under, or "" when the client may link it.
func serverOnlyEntry(path string) string {
	if slices.Contains(clientSide, path) {
		return ""
	}
	for _, f := range serverOnly {
		if path == f || strings.HasPrefix(path, f+"/") {
			return f
		}
	}
	return ""
}

// TestClientDoesNotLinkServer fails when aperio-client's binary (this
// package without its tests) depends on a server package again, and shows
// the chain of imports that brings it in.
func TestClientDoesNotLinkServer(t *testing.T) {
	// The release build: make build sets CGO_ENABLED=0.
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = new(strings.Builder)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, cmd.Stderr)
	}
	imports := map[string][]string{} // package → its imports
	var main string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		imports[fields[0]] = fields[1:]
		main = fields[0] // go list -deps prints the named package last
	}
	// The list must be the client's: an empty or wrong one would pass.
	for _, want := range []string{"github.com/aperio-dev/aperio/cmd/aperio-client", "github.com/aperio-dev/aperio/internal/agent", "github.com/aperio-dev/aperio/internal/control/admin/apiclient"} {
		if _, ok := imports[want]; !ok {
			t.Fatalf("go list -deps of aperio-client lacks %s (last package %s): not the client's dependencies", want, main)
		}
	}
	// One error per serverOnly entry, with its nearest package.
	nearest := map[string][]string{} // serverOnly entry → chain to it
	for pkg := range imports {
		f := serverOnlyEntry(pkg)
		if f == "" {
			continue
		}
		chain := importChain(imports, main, pkg)
		if old, ok := nearest[f]; !ok || len(chain) < len(old) || len(chain) == len(old) && pkg < old[len(old)-1] {
			nearest[f] = chain
		}
	}
	for _, f := range serverOnly {
		if chain, ok := nearest[f]; ok {
			t.Errorf("aperio-client links %s: %s", f, strings.Join(chain, " → "))
		}
	}
}

// importChain returns a shortest chain of imports from "from" to "to" in
// imports, both ends included; nil when there is none.
func importChain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

func TestServerOnlyEntry(t *testing.T) {
	tests := []struct {
		path, want string
	}{
		{"github.com/aperio-dev/aperio/internal/control/admin", "github.com/aperio-dev/aperio/internal/control/admin"},
		{"github.com/aperio-dev/aperio/internal/control/admin/apiclient", ""},
		{"github.com/aperio-dev/aperio/store/storetest", "github.com/aperio-dev/aperio/store"},
		{"github.com/aperio-dev/aperio/storefront", ""},
		{"github.com/aperio-dev/aperio/internal/agent", ""},
		{"github.com/jackc/pgx/v5/pgconn", "github.com/jackc/pgx/v5"},
		{"go.opentelemetry.io/otel/sdk/metric", "go.opentelemetry.io/otel/sdk"},
		{"go.opentelemetry.io/otel", ""},
		{"github.com/prometheus/client_golang/prometheus", "github.com/prometheus"},
		{"github.com/hashicorp/yamux", ""},
	}
	for _, tt := range tests {
		if got := serverOnlyEntry(tt.path); got != tt.want {
			t.Errorf("serverOnlyEntry(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}
