package migrations

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var fileName = regexp.MustCompile(`^(\d{4})_[a-z0-9_]+\.sql$`)

// TestDialectsAgree: both dialects hold the same numbered files, from 0001
// without gaps, each forward-only.
func TestDialectsAgree(t *testing.T) {
	names := map[string][]string{}
	for dialect, fsys := range map[string]fs.FS{"sqlite": SQLite(), "postgres": Postgres()} {
		entries, err := fs.ReadDir(fsys, ".")
		if err != nil {
			t.Fatalf("ReadDir(%s) = %v", dialect, err)
		}
		for i, e := range entries {
			m := fileName.FindStringSubmatch(e.Name())
			if m == nil {
				t.Errorf("%s/%s: want NNNN_name.sql", dialect, e.Name())
				continue
			}
			if want := fmt.Sprintf("%04d", i+1); m[1] != want {
				t.Errorf("%s/%s: version %s, want %s (numbered from 0001 without gaps)", dialect, e.Name(), m[1], want)
			}
			body, err := fs.ReadFile(fsys, e.Name())
			if err != nil {
				t.Fatalf("ReadFile(%s/%s) = %v", dialect, e.Name(), err)
			}
			if !strings.Contains(string(body), "-- +goose Up") || strings.Contains(string(body), "-- +goose Down") {
				t.Errorf("%s/%s: want a goose Up section and no Down (forward-only)", dialect, e.Name())
			}
			names[dialect] = append(names[dialect], e.Name())
		}
	}
	if len(names["sqlite"]) == 0 {
		t.Fatal("no migrations")
	}
	if !slices.Equal(names["sqlite"], names["postgres"]) {
		t.Errorf("sqlite migrations %v, postgres %v: want the same files", names["sqlite"], names["postgres"])
	}
}
