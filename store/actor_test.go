package store_test

import (
	"testing"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// TestActorSpellings pins every actor's spelling: they are public (the
// admin API's audit listing and its actor filter, webhooks'
// detail.actor), and each was written by hand before it had a type.
func TestActorSpellings(t *testing.T) {
	tests := []struct {
		got  store.Actor
		want string
	}{
		{store.MasterActor, "master"},
		{store.ServerActor, "server"},
		{store.VisitorActor, "visitor"},
		{store.AnonymousActor, "anonymous"},
		{store.TokenActor("tok_abc"), "token:tok_abc"},
		{store.ClientActor("tok_abc"), "token:tok_abc"},
		{store.ClientActor(""), "master"},
		{store.AdminKeyActor("ak_1"), "key:ak_1"},
		{store.OIDCActor("jane@example.com"), "oidc:jane@example.com"},
		// The ID is taken as it is: the store escapes control characters
		// when it writes the entry.
		{store.TokenActor(""), "token:"},
		{store.AdminKeyActor("a:b"), "key:a:b"},
	}
	for _, tt := range tests {
		if string(tt.got) != tt.want || tt.got.String() != tt.want {
			t.Errorf("actor %q (String %q), want %q", string(tt.got), tt.got.String(), tt.want)
		}
	}
}

// TestAuditKeepsActor: an entry's actor is stored and listed exactly as
// built, and the actor filter finds it by its spelling, on each backend.
func TestAuditKeepsActor(t *testing.T) {
	t.Parallel()
	for name, fresh := range map[string]func(testing.TB) store.Config{"sqlite": storetest.MigratedSQLite, "postgres": storetest.MigratedPostgres} {
		t.Run(name, func(t *testing.T) {
			db := storetest.Open(t, fresh(t))
			for _, a := range []store.Actor{store.TokenActor("tok_1"), store.AdminKeyActor("ak_1"), store.OIDCActor("jane@example.com"), store.MasterActor} {
				if _, err := db.AppendAudit(t.Context(), store.AuditEntry{Event: "token_minted", Actor: a}); err != nil {
					t.Fatalf("AppendAudit(actor %s) = %v", a, err)
				}
				got, err := db.QueryAudit(t.Context(), store.AuditQuery{Actor: a.String(), Limit: 10})
				if err != nil {
					t.Fatalf("QueryAudit(actor %s) = %v", a, err)
				}
				if len(got) != 1 || got[0].Actor != a {
					t.Errorf("QueryAudit(actor %s) = %+v, want the one entry by it", a, got)
				}
			}
		})
	}
}
