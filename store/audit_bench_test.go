package store_test

import (
	"fmt"
	"testing"

	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/store/storetest"
)

// The cost of the audit chain: an append now locks the chain head and
// hashes the entry in its transaction, and --verify-audit reads every
// entry once. Run with -bench Audit; the PostgreSQL half needs
// APERIO_TEST_POSTGRES_DSN.

func benchBackends() []struct {
	name  string
	fresh func(testing.TB) store.Config
} {
	return []struct {
		name  string
		fresh func(testing.TB) store.Config
	}{{"sqlite", storetest.SQLite}, {"postgres", storetest.Postgres}}
}

func BenchmarkAppendAudit(b *testing.B) {
	for _, bk := range benchBackends() {
		b.Run(bk.name, func(b *testing.B) {
			db := storetest.Open(b, bk.fresh(b))
			e := store.AuditEntry{Event: "token_minted", Actor: "master", Hostname: "app.example.com", Detail: "token tok_x name=\"web\""}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.AppendAudit(b.Context(), e); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bk.name+"/parallel", func(b *testing.B) {
			db := storetest.Open(b, bk.fresh(b))
			e := store.AuditEntry{Event: "login_failed", Actor: "anonymous", Detail: "203.0.113.7"}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := db.AppendAudit(b.Context(), e); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkVerifyAudit(b *testing.B) {
	const entries = 10_000
	for _, bk := range benchBackends() {
		b.Run(fmt.Sprintf("%s/%d", bk.name, entries), func(b *testing.B) {
			db := storetest.Open(b, bk.fresh(b))
			for i := range entries {
				if _, err := db.AppendAudit(b.Context(), store.AuditEntry{Event: "token_minted", Actor: "master", Detail: fmt.Sprint("tok_", i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				n, err := db.VerifyAudit(b.Context())
				if n != entries || err != nil {
					b.Fatalf("VerifyAudit() = %d, %v; want %d, nil", n, err, entries)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/entries, "ns/entry")
		})
	}
}
