package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
)

// TestWarnsOrgsWithoutHostnames: at startup the server names the
// organizations, besides the default one, that own no hostname pattern
// (their clients may bind nothing), and stays quiet about those that own
// some.
func TestWarnsOrgsWithoutHostnames(t *testing.T) {
	cfg := serverConfig(t)
	db, err := store.Open(context.Background(), store.Config{DataDir: cfg.Store.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("store Close() = %v", err)
		}
	})
	for _, name := range []string{"bare-one", "bare-two", "owning"} {
		o, err := db.CreateOrg(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "owning" {
			if _, err := db.SetOrgHostnames(t.Context(), o.ID, []string{"*.owning.test"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	logs := &syncBuffer{}
	startServerWith(t, cfg, nil, nil, server.Options{Store: db, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	var warned []string
	for _, l := range logs.lines(t) {
		if msg, _ := l["msg"].(string); strings.Contains(msg, "without hostname patterns") && l["level"] == "WARN" {
			warned = append(warned, fmt.Sprint(l["orgs"]))
		}
	}
	if len(warned) != 1 || warned[0] != "[bare-one bare-two]" && warned[0] != "[bare-two bare-one]" {
		t.Errorf("startup warnings = %q, want one naming bare-one and bare-two only", warned)
	}
}
