package autoscale

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestDeclareRecordCaps proves the caps: a token arms at most
// MaxRecordsPerToken records and an organization holds at most
// MaxRecordsPerOrg; a declaration over a cap is refused with
// ErrRecordLimit before any store access, while records already held keep
// being declared.
func TestDeclareRecordCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, withConfig(func(c *Config) { c.MaxRecordsPerToken = 3; c.MaxRecordsPerOrg = 5 }))
		ctx := context.Background()
		declare := func(host, armer string) error {
			a := announce(host, "sess_"+armer, block(host))
			a.Armer = armer
			return h.c.Declare(ctx, a)
		}
		for i := range 3 {
			if err := declare(fmt.Sprintf("a%d.example.com", i), "tok_a"); err != nil {
				t.Fatalf("Declare(a%d) by tok_a = %v, want nil", i, err)
			}
		}
		h.store.mu.Lock()
		before := len(h.store.declares)
		h.store.mu.Unlock()
		for i := 3; i < 1000; i++ {
			if err := declare(fmt.Sprintf("a%d.example.com", i), "tok_a"); !errors.Is(err, ErrRecordLimit) {
				t.Fatalf("Declare(a%d) by tok_a over its cap = %v, want ErrRecordLimit", i, err)
			}
		}
		h.store.mu.Lock()
		after, stored := len(h.store.declares), len(h.store.recs)
		h.store.mu.Unlock()
		if after != before || stored != 3 {
			t.Fatalf("after 997 refused declarations: %d store writes, %d records; want none and 3", after-before, stored)
		}
		// A record the token already arms is still declared.
		if err := declare("a0.example.com", "tok_a"); err != nil {
			t.Fatalf("Declare(a0) again = %v, want nil", err)
		}
		// Another token of the org fills the org's cap of 5, then stops.
		for i := range 2 {
			if err := declare(fmt.Sprintf("b%d.example.com", i), "tok_b"); err != nil {
				t.Fatalf("Declare(b%d) by tok_b = %v, want nil", i, err)
			}
		}
		if err := declare("b2.example.com", "tok_b"); !errors.Is(err, ErrRecordLimit) {
			t.Fatalf("Declare(b2) over the org's cap = %v, want ErrRecordLimit", err)
		}
		// Joining a record the org already holds creates nothing: only the
		// token's cap applies.
		if err := declare("a1.example.com", "tok_b"); err != nil {
			t.Fatalf("Declare(a1) by tok_b = %v, want nil", err)
		}
		// The master token is bounded by the org's cap only.
		if err := declare("m.example.com", masterArmer); !errors.Is(err, ErrRecordLimit) {
			t.Fatalf("Declare(m) by master over the org's cap = %v, want ErrRecordLimit", err)
		}
		// A deleted record frees its place.
		r, ok := h.store.get("b0.example.com")
		if !ok {
			t.Fatal("no record for b0.example.com")
		}
		if err := h.c.Disarm(ctx, testOrg, r.ID); err != nil {
			t.Fatal(err)
		}
		if err := declare("b2.example.com", "tok_b"); err != nil {
			t.Fatalf("Declare(b2) after a record was removed = %v, want nil", err)
		}
	})
}

// TestDeclareRefusesAnotherOrgsBind proves that the first organization to
// arm a bind keeps it: a second organization's declaration for the same
// hostname and path is refused with ErrBindTaken, and its hook is never
// stored.
func TestDeclareRefusesAnotherOrgsBind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		if err := h.c.Declare(ctx, announce("shop.example.com", "sess_a", block("shop.example.com"))); err != nil {
			t.Fatal(err)
		}
		other := announce("shop.example.com", "sess_b", Declaration{URL: "https://evil.example/hook"})
		other.OrgID = "org_2"
		if err := h.c.Declare(ctx, other); !errors.Is(err, ErrBindTaken) {
			t.Fatalf("Declare by a second org = %v, want ErrBindTaken", err)
		}
		other.Path = "/api" // another bind: allowed
		if err := h.c.Declare(ctx, other); err != nil {
			t.Fatalf("Declare by a second org for another path = %v, want nil", err)
		}
		if _, err := h.c.ColdStart(ctx, "org_2", "shop.example.com", ""); !errors.Is(err, ErrNoRecord) {
			t.Fatalf("ColdStart(org_2, shop.example.com) = %v, want ErrNoRecord", err)
		}
	})
}

// TestDeclareCapsHoldUnderConcurrency proves that declarations racing for
// the last places of a cap never overshoot it: what is being created
// counts until it is stored.
func TestDeclareCapsHoldUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil, func(c *Config, h *harness) {
			c.MaxRecordsPerToken = 3
			c.Store = slowStore{h.store}
		})
		errs := make(chan error, 64)
		for i := range 64 {
			go func() {
				host := fmt.Sprintf("h%d.example.com", i)
				a := announce(host, fmt.Sprint("sess_", i), block(host))
				a.Armer = "tok_flood"
				errs <- h.c.Declare(context.Background(), a)
			}()
		}
		ok := 0
		for range 64 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case !errors.Is(err, ErrRecordLimit):
				t.Fatalf("Declare = %v, want nil or ErrRecordLimit", err)
			}
		}
		h.store.mu.Lock()
		stored := len(h.store.recs)
		h.store.mu.Unlock()
		if ok != 3 || stored != 3 {
			t.Fatalf("64 concurrent declarations under a cap of 3: %d accepted, %d stored; want 3 and 3", ok, stored)
		}
	})
}

// slowStore is a fakeStore whose writes take a millisecond of the
// bubble's clock, so that concurrent declarations are all in flight at
// once.
type slowStore struct{ *fakeStore }

func (s slowStore) DeclareScaling(ctx context.Context, r Record, armer string, rearm bool) (Record, bool, error) {
	time.Sleep(time.Millisecond)
	return s.fakeStore.DeclareScaling(ctx, r, armer, rearm)
}

// TestDeclareKeepsBothRecordsOfARace proves that when two organizations
// already hold records for one bind (two servers raced), each keeps
// declaring its own: only a new record is refused with ErrBindTaken.
func TestDeclareKeepsBothRecordsOfARace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := rec("shop.example.com")
		other.OrgID = "org_2"
		h := newHarness(t, []Record{rec("shop.example.com"), other})
		ctx := context.Background()
		mine := announce("shop.example.com", "sess_a", block("shop.example.com"))
		if err := h.c.Declare(ctx, mine); err != nil {
			t.Fatalf("Declare by org_1 of its own raced record = %v, want nil", err)
		}
		theirs := announce("shop.example.com", "sess_b", block("shop.example.com"))
		theirs.OrgID = "org_2"
		if err := h.c.Declare(ctx, theirs); err != nil {
			t.Fatalf("Declare by org_2 of its own raced record = %v, want nil", err)
		}
		third := announce("shop.example.com", "sess_c", block("shop.example.com"))
		third.OrgID = "org_3"
		if err := h.c.Declare(ctx, third); !errors.Is(err, ErrBindTaken) {
			t.Fatalf("Declare by a third org = %v, want ErrBindTaken", err)
		}
	})
}
