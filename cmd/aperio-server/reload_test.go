package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/cmd/aperio-server/serverconfig"
	"github.com/aperio-dev/aperio/internal/server"
)

// allReloadKeys is every key as a reload treats it: the gateway's, then
// the process settings main applies.
func allReloadKeys() []server.ReloadKey {
	return append(server.ReloadKeys(), processKeys...)
}

// TestReloadKeysCoverEveryKey: each key of the server is judged by a
// reload exactly once, live or needing a restart, so that a key added to
// the table cannot change silently on a reload without applying (nor
// without being named as needing a restart).
func TestReloadKeysCoverEveryKey(t *testing.T) {
	seen := map[string]int{}
	for _, k := range allReloadKeys() {
		seen[k.Name]++
	}
	for _, k := range serverconfig.Keys() {
		if seen[k.Name] != 1 {
			t.Errorf("key %s is judged by a reload %d times, want once (gateway reloadKeys or processKeys)", k.Name, seen[k.Name])
		}
		delete(seen, k.Name)
	}
	for name := range seen {
		t.Errorf("a reload judges %s, which is no key of the server", name)
	}
}

// reloadDoc is the page that lists the live and the restart keys.
var reloadDoc = filepath.Join("..", "..", "docs", "configuration.md")

// keyList formats names as the page writes them: back-quoted, comma
// separated, wrapped before 72 columns.
func keyList(names []string) string {
	var b strings.Builder
	line := 0
	for i, n := range names {
		w := "`" + n + "`"
		if i < len(names)-1 {
			w += ","
		}
		if line > 0 && line+1+len(w) > 72 {
			b.WriteString("\n")
			line = 0
		}
		if line > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

// TestReloadDocListsKeys: docs/configuration.md lists exactly the keys a
// reload applies and those it leaves for a restart (-update rewrites the
// two lists).
func TestReloadDocListsKeys(t *testing.T) {
	var live, restart []string
	for _, k := range allReloadKeys() {
		if k.Live {
			live = append(live, k.Name)
		} else {
			restart = append(restart, k.Name)
		}
	}
	b, err := os.ReadFile(reloadDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, block := range []struct {
		marker string
		keys   []string
	}{{"reload-live", live}, {"reload-restart", restart}} {
		open := "<!-- " + block.marker
		start := strings.Index(doc, open)
		end := strings.Index(doc, "<!-- /"+block.marker+" -->")
		if start < 0 || end < start {
			t.Fatalf("%s has no %s ... /%s block", reloadDoc, open, block.marker)
		}
		start += strings.Index(doc[start:], "-->\n") + len("-->\n")
		want := keyList(block.keys) + "\n"
		if got := doc[start:end]; got != want {
			if !*update {
				t.Errorf("%s %s block = %q, want %q (go test -run TestReloadDocListsKeys -update rewrites it)", reloadDoc, block.marker, got, want)
				continue
			}
			doc = doc[:start] + want + doc[end:]
		}
	}
	if *update && doc != string(b) {
		if err := os.WriteFile(reloadDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(live, "log_level") || slices.Contains(live, "port") {
		t.Errorf("live keys = %v, want log_level in them and port not", live)
	}
}
