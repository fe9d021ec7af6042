package servertest

import (
	"testing"

	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/store"
)

// OpenStore opens the store of cfg (a SQLite data directory or a
// PostgreSQL DSN) and closes it at cleanup: after the servers a test
// starts later stop, since cleanups run last-registered first.
func OpenStore(t testing.TB, cfg store.Config) *store.DB {
	t.Helper()
	db, err := store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("store Close() = %v", err)
		}
	})
	return db
}

// StartOn serves cfg with db as its store, on a fresh 127.0.0.1:0
// listener over plain HTTP, until the test ends; several servers sharing
// one database are how a test runs a cluster. The caller closes db, after
// the server stops (OpenStore's cleanup does).
func StartOn(t testing.TB, cfg server.Config, db *store.DB) *Server {
	t.Helper()
	return StartWith(t, cfg, nil, nil, server.Options{Logger: Logger(), Store: db})
}
