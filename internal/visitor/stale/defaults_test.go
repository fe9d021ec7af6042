package stale_test

import (
	"testing"

	"github.com/aperio-dev/aperio/internal/visitor/stale"
)

// TestDefaultConfigValidates proves the defaults are valid and make an
// enabled cache, one that stores an answer.
func TestDefaultConfigValidates(t *testing.T) {
	cfg := stale.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	if cfg.MaxBytes <= 0 || cfg.MaxStale <= 0 {
		t.Fatalf("DefaultConfig() = %+v: a zero bound disables the cache", cfg)
	}
	c, err := stale.New(cfg)
	if err != nil || c == nil {
		t.Fatalf("New(DefaultConfig()) = %v, %v, want an enabled cache", c, err)
	}
}
