package server_test

import (
	"fmt"
	"github.com/aperio-dev/aperio/internal/server/servertest"
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
	t.Parallel()
	cfg := servertest.Config(t)
	db := openStoreAt(t, cfg.Store.DataDir)
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
	logs := &servertest.SyncBuffer{}
	servertest.StartWith(t, cfg, nil, nil, server.Options{Store: db, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	var warned []string
	for _, l := range logs.Lines(t) {
		if msg, _ := l["msg"].(string); strings.Contains(msg, "without hostname patterns") && l["level"] == "WARN" {
			warned = append(warned, fmt.Sprint(l["orgs"]))
		}
	}
	if len(warned) != 1 || warned[0] != "[bare-one bare-two]" && warned[0] != "[bare-two bare-one]" {
		t.Errorf("startup warnings = %q, want one naming bare-one and bare-two only", warned)
	}
}

// TestWarnsOrgsWithoutPorts (#38): on a server with a tcp_port_range,
// startup names the organizations, besides the default one, that hold a
// token for public ports but own no port (their clients may open none),
// and stays quiet about those that own ports or hold no such token.
func TestWarnsOrgsWithoutPorts(t *testing.T) {
	t.Parallel()
	cfg := servertest.Config(t)
	cfg.TCPPortRange = []string{"20000-20099"}
	db := openStoreAt(t, cfg.Store.DataDir)
	for i, name := range []string{"portless", "owning", "no-port-tokens"} {
		o, err := db.CreateOrg(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "owning" {
			if _, err := db.SetOrgPorts(t.Context(), o.ID, []string{"20000-20009"}); err != nil {
				t.Fatal(err)
			}
		}
		var ports []string
		if name != "no-port-tokens" {
			ports = []string{"20000"}
		}
		hash := make([]byte, 32)
		hash[0] = byte(i + 1)
		if _, err := db.CreateToken(t.Context(), store.Token{OrgID: o.ID, Name: "t", Hash: hash, Prefix: fmt.Sprint("apr_", i), Hostnames: []string{name + ".test"},
			Limits: store.TokenLimits{AllowTCPPorts: ports}}); err != nil {
			t.Fatal(err)
		}
	}
	logs := &servertest.SyncBuffer{}
	servertest.StartWith(t, cfg, nil, nil, server.Options{Store: db, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	var warned []string
	for _, l := range logs.Lines(t) {
		if msg, _ := l["msg"].(string); strings.Contains(msg, "without ports may open no public port") && l["level"] == "WARN" {
			warned = append(warned, fmt.Sprint(l["orgs"]))
		}
	}
	if len(warned) != 1 || warned[0] != "[portless]" {
		t.Errorf("startup warnings = %q, want one naming portless only", warned)
	}
}

// openStoreAt opens the SQLite store in dir, closed at cleanup (after
// the servers started later stop).
func openStoreAt(t *testing.T, dir string) *store.DB {
	t.Helper()
	return servertest.OpenStore(t, store.Config{DataDir: dir})
}
