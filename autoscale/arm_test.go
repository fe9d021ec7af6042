package autoscale

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// operatorArm is an operator's declaration of b for host in testOrg by the
// admin key key_1.
func operatorArm(host string, b Declaration) OperatorDeclaration {
	return OperatorDeclaration{OrgID: testOrg, Hostname: host, Armer: "key:key_1", Block: b}
}

// TestArmCreatesRecordThatColdStarts proves that an operator's declaration
// creates the record a client's would (the defaults applied, re-armed,
// the operator as its armer) without any client session, and that the
// first request for the bind then cold starts it.
func TestArmCreatesRecordThatColdStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		v, created, err := h.c.Arm(context.Background(), operatorArm("app.example.com", Declaration{URL: "https://hooks.example/app", Secret: "s3cret"}))
		if err != nil || !created {
			t.Fatalf("Arm = %v, created %t, want a new record", err, created)
		}
		if v.ID == "" || v.Min != 0 || v.Max != 1 || v.ColdStart != DefaultColdStart || v.TargetUtilization != DefaultTargetUtilization ||
			v.Window != DefaultWindow || v.Cooldown != DefaultCooldown || !v.Authenticated || v.Disarmed {
			t.Errorf("Arm view = %+v, want the defaults of a client's block, armed, authenticated", v)
		}
		d := h.store.lastDeclare(t)
		if d.armer != "key:key_1" || !d.rearm || d.rec.Conflict {
			t.Errorf("DeclareScaling armer %q rearm %t conflict %t, want key:key_1, true, false", d.armer, d.rearm, d.rec.Conflict)
		}
		st, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart after Arm = %v", err)
		}
		synctest.Wait()
		select {
		case <-st.Done():
		default:
			t.Fatal("cold start not done after the call was accepted")
		}
		expectCall(t, h, 1, 0, ReasonColdStart, 0, 1)
		if c := h.caller.made()[0]; c.URL != "https://hooks.example/app" || c.Secret != "s3cret" {
			t.Errorf("cold start called %q with secret %q, want the declared hook and secret", c.URL, c.Secret)
		}
	})
}

// TestArmUpdatesAndRearms proves that declaring a bind that has a record,
// disarmed by the breaker, stores the new block, re-arms it and says it
// was not created.
func TestArmUpdatesAndRearms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := rec("app.example.com")
		r.Disarmed, r.ConsecutiveFailures, r.ArmedBy = true, MaxFailures, []string{"tok_a"}
		h := newHarness(t, []Record{r})
		v, created, err := h.c.Arm(context.Background(), operatorArm("app.example.com", Declaration{URL: "https://hooks.example/new", Max: 3}))
		if err != nil || created {
			t.Fatalf("Arm = %v, created %t, want the record updated", err, created)
		}
		got, _ := h.store.get("app.example.com")
		if v.Disarmed || got.Disarmed || got.ConsecutiveFailures != 0 || got.URL != "https://hooks.example/new" || got.Max != 3 ||
			strings.Join(got.ArmedBy, ",") != "tok_a,key:key_1" {
			t.Errorf("record after Arm = %+v, want re-armed with the new block and both armers", got)
		}
	})
}

// TestArmRefusals proves that an operator's declaration meets the rules
// a client's does: an invalid block is ErrInvalid, a URL the outbound
// policy refuses too, the per-armer and per-organization caps are
// ErrRecordLimit, and another organization's bind is ErrBindTaken; none
// of them writes.
func TestArmRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := rec("taken.example.com")
		other.OrgID = "org_other"
		h := newHarness(t, []Record{other}, withConfig(func(c *Config) {
			c.MaxRecordsPerToken, c.MaxRecordsPerOrg = 1, 3
			c.Policy = refuseHost{"internal.example"}
		}))
		ctx := context.Background()
		ok := Declaration{URL: "https://hooks.example/x"}
		for _, tt := range []struct {
			name string
			d    OperatorDeclaration
			want error
		}{
			{"max below min", operatorArm("a.example.com", Declaration{URL: ok.URL, Min: 3, Max: 2}), ErrInvalid},
			{"NaN utilization", operatorArm("a.example.com", Declaration{URL: ok.URL, TargetUtilization: math.NaN()}), ErrInvalid},
			{"window too short", operatorArm("a.example.com", Declaration{URL: ok.URL, Window: time.Millisecond}), ErrInvalid},
			{"no url", operatorArm("a.example.com", Declaration{}), ErrInvalid},
			{"policy", operatorArm("a.example.com", Declaration{URL: "https://internal.example/scale"}), ErrInvalid},
			{"another organization's bind", operatorArm("taken.example.com", ok), ErrBindTaken},
		} {
			if _, _, err := h.c.Arm(ctx, tt.d); !errors.Is(err, tt.want) {
				t.Errorf("Arm(%s) = %v, want %v", tt.name, err, tt.want)
			}
		}
		h.store.mu.Lock()
		n := len(h.store.declares)
		h.store.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d DeclareScaling calls for refused declarations, want none", n)
		}
		if _, _, err := h.c.Arm(ctx, operatorArm("a.example.com", ok)); err != nil {
			t.Fatalf("Arm(a) = %v", err)
		}
		if _, _, err := h.c.Arm(ctx, operatorArm("b.example.com", ok)); !errors.Is(err, ErrRecordLimit) {
			t.Errorf("Arm(b) by the same key over its cap = %v, want ErrRecordLimit", err)
		}
		// The master token is bounded by the organization's cap only.
		master := func(host string) OperatorDeclaration {
			d := operatorArm(host, ok)
			d.Armer = masterArmer
			return d
		}
		for _, host := range []string{"b.example.com", "c.example.com"} {
			if _, _, err := h.c.Arm(ctx, master(host)); err != nil {
				t.Fatalf("Arm(%s) by master = %v", host, err)
			}
		}
		if _, _, err := h.c.Arm(ctx, master("d.example.com")); !errors.Is(err, ErrRecordLimit) {
			t.Errorf("Arm(d) by master over the organization's cap = %v, want ErrRecordLimit", err)
		}
	})
}

// TestArmThenClientDeclares proves that a client declaring the bind later
// stores its own block, as a newer session would, and adds its token.
func TestArmThenClientDeclares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		if _, _, err := h.c.Arm(ctx, operatorArm("app.example.com", Declaration{URL: "https://hooks.example/op"})); err != nil {
			t.Fatalf("Arm = %v", err)
		}
		if err := h.c.Declare(ctx, announce("app.example.com", "s1", block("app.example.com"))); err != nil {
			t.Fatalf("Declare = %v", err)
		}
		got, _ := h.store.get("app.example.com")
		if got.URL != "https://hooks.example/app.example.com" || strings.Join(got.ArmedBy, ",") != "key:key_1,tok_s1" {
			t.Errorf("record after the client's declaration = %+v, want its block and both armers", got)
		}
	})
}

// refuseHost is a URLChecker refusing the URLs of one host.
type refuseHost struct{ host string }

func (r refuseHost) CheckURL(raw string) error {
	if strings.Contains(raw, "://"+r.host+"/") {
		return errors.New("refused host")
	}
	return nil
}

// TestOperatorArmer proves which armers are admin API callers.
func TestOperatorArmer(t *testing.T) {
	for armer, want := range map[string]bool{"key:key_1": true, "oidc:jane@example.com": true, "master": false, "tok_1": false, "": false} {
		if got := OperatorArmer(armer); got != want {
			t.Errorf("OperatorArmer(%q) = %t, want %t", armer, got, want)
		}
	}
}

// TestColdStartLearnsRecordFromStore proves that a cold start of a bind
// whose record another server stored, which this controller has not
// reloaded yet, reads it from the store and calls, rather than answering
// ErrNoRecord while the router already holds the visitor; a bind with no
// record still answers ErrNoRecord.
func TestColdStartLearnsRecordFromStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.store.put(rec("app.example.com")) // no change feed: no reload
		st, err := h.c.ColdStart(context.Background(), testOrg, "app.example.com", "")
		if err != nil {
			t.Fatalf("ColdStart of a record only the store holds = %v, want a call", err)
		}
		synctest.Wait()
		<-st.Done()
		expectCall(t, h, 1, 0, ReasonColdStart, 0, 1)
		if _, err := h.c.ColdStart(context.Background(), testOrg, "none.example.com", ""); !errors.Is(err, ErrNoRecord) {
			t.Errorf("ColdStart of a bind without a record = %v, want ErrNoRecord", err)
		}
	})
}
