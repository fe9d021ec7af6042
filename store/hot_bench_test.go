package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// The store methods on the hot paths, on both engines: the admin API's
// (authenticating a token, a key or a session, listing tokens, the
// ownership and organization lookups, appending and listing the audit
// log) and the heartbeat's (the scaling record of a bind, refreshing its
// declaration, flushing usage and reading its totals). Run with
// -bench HotPath; the PostgreSQL half needs APERIO_TEST_POSTGRES_DSN.

// hotFixture is a store holding what a busy organization has: hotTokens
// tokens, a key and a session, hotOrgs organizations of three hostname
// patterns each, hotAudit audit entries, a scaling record and a day of
// usage for every token.
type hotFixture struct {
	db      *store.DB
	org     store.Org
	tokens  []store.Token
	key     store.AdminKey
	session []byte
	scaling store.ScalingRecord
	deltas  []store.UsageDelta
	day     time.Time
}

const (
	hotTokens = 50
	hotOrgs   = 20
	hotAudit  = 1000
)

func newHotFixture(b *testing.B, cfg store.Config) hotFixture {
	b.Helper()
	ctx := b.Context()
	db := storetest.Open(b, cfg)
	f := hotFixture{db: db, day: time.Date(2031, 3, 4, 0, 0, 0, 0, time.UTC)}
	for i := range hotOrgs {
		o := mustOrg(b, db, fmt.Sprintf("org-%02d", i))
		if i == 0 {
			f.org = o
		}
		ps := []string{fmt.Sprintf("app%d.example.com", i), fmt.Sprintf("*.t%d.example.com", i), fmt.Sprintf("api%d.example.net", i)}
		if _, err := db.SetOrgHostnames(ctx, o.ID, ps); err != nil {
			b.Fatalf("SetOrgHostnames() = %v", err)
		}
	}
	for i := range hotTokens {
		t := mustToken(b, db, store.Token{OrgID: f.org.ID, Name: fmt.Sprint("web-", i), Prefix: "apr_x",
			Hash: hash(fmt.Sprint("hot-token-", i)), Hostnames: []string{"app0.example.com", "*.t0.example.com"},
			AllowedIPs: []string{"10.0.0.0/8"}, CreatedBy: "master"})
		f.tokens = append(f.tokens, t)
		f.deltas = append(f.deltas, store.UsageDelta{Day: f.day, TokenID: t.ID, OrgID: f.org.ID,
			Hostname: "app0.example.com", Bytes: 4096, Requests: 3})
	}
	f.key = mustKey(b, db, store.AdminKey{OrgID: f.org.ID, Name: "ops", Role: "admin", Hash: hash("hot-key")})
	f.session = hash("hot-session")
	if _, err := db.CreateAdminSession(ctx, store.AdminSession{Hash: f.session, KeyID: f.key.ID, CSRF: "c",
		ExpiresAt: time.Now().Add(time.Hour)}, 32); err != nil {
		b.Fatalf("CreateAdminSession() = %v", err)
	}
	for i := range hotAudit {
		if _, err := db.AppendAudit(ctx, store.AuditEntry{OrgID: f.org.ID, Event: "token_minted", Actor: store.AdminKeyActor(f.key.ID),
			Hostname: "app0.example.com", Detail: fmt.Sprint("token tok_", i)}); err != nil {
			b.Fatalf("AppendAudit() = %v", err)
		}
	}
	f.scaling, _ = mustDeclare(b, db, declaration(f.org.ID, "app0.example.com", ""), f.tokens[0].ID, true)
	if err := db.AddUsage(ctx, f.deltas); err != nil {
		b.Fatalf("AddUsage() = %v", err)
	}
	return f
}

func BenchmarkHotPath(b *testing.B) {
	for _, bk := range benchBackends() {
		b.Run(bk.name, func(b *testing.B) {
			f := newHotFixture(b, bk.fresh(b))
			ctx := b.Context()
			ids := make([]string, len(f.tokens))
			for i, t := range f.tokens {
				ids[i] = t.ID
			}
			tests := []struct {
				name string
				op   func(i int) error
			}{
				// The admin API.
				{"TokenByHash", func(i int) error {
					_, err := f.db.TokenByHash(ctx, f.tokens[i%len(f.tokens)].Hash)
					return err
				}},
				{"ListTokens", func(int) error {
					ts, err := f.db.ListTokens(ctx, f.org.ID)
					if err == nil && len(ts) != hotTokens {
						err = fmt.Errorf("ListTokens() = %d tokens, want %d", len(ts), hotTokens)
					}
					return err
				}},
				{"AdminKeyByHash", func(int) error {
					_, err := f.db.AdminKeyByHash(ctx, f.key.Hash)
					return err
				}},
				{"AdminSessionByHash", func(int) error {
					_, err := f.db.AdminSessionByHash(ctx, f.session)
					return err
				}},
				{"Org", func(int) error {
					_, err := f.db.Org(ctx, f.org.ID)
					return err
				}},
				{"ListOrgHostnames", func(int) error {
					hs, err := f.db.ListOrgHostnames(ctx, "")
					if err == nil && len(hs) != 3*hotOrgs {
						err = fmt.Errorf("ListOrgHostnames() = %d patterns, want %d", len(hs), 3*hotOrgs)
					}
					return err
				}},
				{"AppendAudit", func(i int) error {
					_, err := f.db.AppendAudit(ctx, store.AuditEntry{OrgID: f.org.ID, Event: "token_revoked",
						Actor: store.AdminKeyActor(f.key.ID), Hostname: "app0.example.com", Detail: "token tok_x"})
					return err
				}},
				{"ListAudit", func(int) error {
					es, err := f.db.ListAudit(ctx, f.org.ID, 100)
					if err == nil && len(es) != 100 {
						err = fmt.Errorf("ListAudit() = %d entries, want 100", len(es))
					}
					return err
				}},
				// The heartbeat.
				{"ScalingRecordByBind", func(int) error {
					_, err := f.db.ScalingRecordByBind(ctx, f.org.ID, f.scaling.Hostname, f.scaling.Path)
					return err
				}},
				{"DeclareScaling", func(int) error {
					_, _, err := f.db.DeclareScaling(ctx, declaration(f.org.ID, "app0.example.com", ""), f.tokens[0].ID, false)
					return err
				}},
				{"AddUsage", func(i int) error {
					// Ten tokens' counts, as one flush of a busy server.
					k := i % (len(f.deltas) / 10)
					return f.db.AddUsage(ctx, f.deltas[k*10:k*10+10])
				}},
				{"UsageTotals", func(int) error {
					tt, _, err := f.db.UsageTotals(ctx, f.day, f.day, ids, []string{f.org.ID})
					if err == nil && len(tt) != hotTokens {
						err = fmt.Errorf("UsageTotals() = %d tokens, want %d", len(tt), hotTokens)
					}
					return err
				}},
			}
			for _, tt := range tests {
				b.Run(tt.name, func(b *testing.B) {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						if err := tt.op(i); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			}
			b.Run("TokenByHash/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, err := f.db.TokenByHash(ctx, f.tokens[i%len(f.tokens)].Hash); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
			})
		})
	}
}
