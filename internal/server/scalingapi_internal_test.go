package server

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/store/storetest"
)

// noPool is an autoscale.PoolView of empty pools.
type noPool struct{}

func (noPool) Pool(_, _, _ string) autoscale.PoolStats { return autoscale.PoolStats{} }

// noCaller is an autoscale.Caller this test never reaches.
type noCaller struct{}

func (noCaller) Call(context.Context, autoscale.HookCall) (int, time.Duration, error) {
	return 0, 0, errors.New("no calls in this test")
}

// TestArmingScalingReloadsArmedBinds proves that the admin API's Arm
// reloads this server's armed binds once its record is stored, before
// the API answers, and not when the declaration is refused.
func TestArmingScalingReloadsArmedBinds(t *testing.T) {
	db := storetest.Open(t, storetest.SQLite(t))
	org, err := db.EnsureOrg(t.Context(), "default")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := autoscale.New(autoscale.Config{Store: db, Pool: noPool{}, Caller: noCaller{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctl.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	reloads := 0
	s := armingScaling{Controller: ctl, arm: func(context.Context) error { reloads++; return nil }, log: slog.New(slog.DiscardHandler)}
	d := autoscale.OperatorDeclaration{OrgID: org.ID, Hostname: "app.test", Armer: "key:key_1",
		Block: autoscale.Declaration{URL: "https://provider.example/scale"}}
	if _, created, err := s.Arm(t.Context(), d); err != nil || !created {
		t.Fatalf("Arm = %v, created %t", err, created)
	}
	if reloads != 1 {
		t.Errorf("%d reloads after an accepted Arm, want 1", reloads)
	}
	d.Block.Min, d.Block.Max = 3, 2
	if _, _, err := s.Arm(t.Context(), d); !errors.Is(err, autoscale.ErrInvalid) {
		t.Fatalf("Arm(max below min) = %v, want ErrInvalid", err)
	}
	if reloads != 1 {
		t.Errorf("%d reloads after a refused Arm, want still 1", reloads)
	}
}
