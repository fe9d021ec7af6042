package aperio_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// layers is the import direction of the product's packages, lowest first:
// a package may import packages of its own layer or of a lower one, never
// of a higher one. It mirrors the table in docs/architecture.md ("Layers");
// change both together. An entry ending in "/..." covers every package
// under it. Every product package must be in the table, so a new package
// is placed on purpose.
var layers = []struct {
	name string
	pkgs []string
}{
	{"helpers", []string{
		"internal/b64", "internal/bufpool", "internal/buildinfo", "internal/clidoc", "internal/debughttp", "internal/exitcode",
		"internal/hangup", "internal/headerrule", "internal/hostname", "internal/logging",
		"internal/logkey", "internal/passhash", "internal/portspec", "internal/recovery",
		"internal/reload", "internal/sdnotify", "internal/testkit/...", "internal/urlpath",
	}},
	{"schema", []string{"migrations"}},
	{"contracts", []string{"tunnel", "store", "store/storetest", "internal/agent/limiter", "internal/outbound"}},
	{"vocabulary", []string{"internal/control/apitype"}},
	{"features", []string{
		"internal/config", "internal/config/configtest",
		"internal/visitor/...", "internal/control/events", "internal/control/webhook",
		"internal/edge/...", "internal/ports", "internal/telemetry",
	}},
	{"engines", []string{"router", "autoscale", "internal/agent"}},
	{"control", []string{"internal/control/admin", "internal/control/admin/apiclient", "internal/control/dashboard"}},
	{"root", []string{"internal/server", "internal/server/servertest"}},
	{"commands", []string{"cmd/..."}},
}

// outsideLayers are the module's packages that are not product code: the
// tools and harnesses around it, free to import any layer.
var outsideLayers = []string{"bench/...", "examples/...", "deploy/...", "test/...", "scripts/..."}

// knownUpward are imports against the table that a change in flight
// removes; each names its issue. The test fails when one of them is gone
// (so the entry is removed with it) as well as when a new one appears.
var knownUpward = map[[2]string]string{}

// layerOf returns the index in layers of the module-relative package p,
// or -1 when the table does not place it.
func layerOf(p string) int {
	for i, l := range layers {
		if matchesAny(p, l.pkgs) {
			return i
		}
	}
	return -1
}

func matchesAny(p string, patterns []string) bool {
	for _, pat := range patterns {
		if prefix, ok := strings.CutSuffix(pat, "/..."); ok {
			if p == prefix || strings.HasPrefix(p, prefix+"/") {
				return true
			}
		} else if p == pat {
			return true
		}
	}
	return false
}

// TestImportsPointDown fails when a product package imports one of a
// higher layer, or is missing from the table.
func TestImportsPointDown(t *testing.T) {
	imports := moduleImports(t)
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/") }
	var upward []string
	seen := map[[2]string]bool{}
	for pkg, deps := range imports {
		p := rel(pkg)
		if p == "" || matchesAny(p, outsideLayers) {
			continue
		}
		from := layerOf(p)
		if from < 0 {
			t.Errorf("%s is in no layer of layers_test.go: place it (and in docs/architecture.md)", p)
			continue
		}
		for _, dep := range deps {
			if _, inModule := imports[dep]; !inModule {
				continue
			}
			d := rel(dep)
			to := layerOf(d)
			if to <= from {
				continue
			}
			edge := [2]string{p, d}
			if _, ok := knownUpward[edge]; ok {
				seen[edge] = true
				continue
			}
			upward = append(upward, fmt.Sprintf("%s (%s) imports %s (%s)", p, layers[from].name, d, layers[to].name))
		}
	}
	slices.Sort(upward)
	for _, u := range upward {
		t.Errorf("upward import: %s", u)
	}
	for edge, why := range knownUpward {
		if !seen[edge] {
			t.Errorf("knownUpward lists %s -> %s (%s), which no longer exists: remove the entry", edge[0], edge[1], why)
		}
	}
}

// TestLayerCheckCatchesUpwardImport runs the check on a made-up graph with
// one upward import, so a check that can no longer fail is itself caught.
func TestLayerCheckCatchesUpwardImport(t *testing.T) {
	if from, to := layerOf("store"), layerOf("router"); from < 0 || to <= from {
		t.Fatalf("layerOf(store) = %d, layerOf(router) = %d; want store below router", from, to)
	}
	if got := layerOf("internal/visitor/access/oidc"); got != layerOf("internal/visitor/access") || got < 0 {
		t.Errorf("layerOf(internal/visitor/access/oidc) = %d, want the layer of internal/visitor/access", got)
	}
	if got := layerOf("internal/nosuch"); got != -1 {
		t.Errorf("layerOf(internal/nosuch) = %d, want -1 (unplaced)", got)
	}
}
