package router

import (
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestDefaultConfigValidates proves the defaults are a working router
// configuration and that the down threshold is the tunnel's, not a second
// copy of its value.
func TestDefaultConfigValidates(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	if got, want := cfg.DownThreshold, tunnel.DefaultServerConfig().DownThreshold; got != want {
		t.Errorf("DefaultConfig().DownThreshold = %v, want the tunnel's %v", got, want)
	}
	if _, err := New(cfg); err != nil {
		t.Fatalf("New(DefaultConfig()) = %v", err)
	}
}

// TestValidateRefusesBadSettings proves each impossible setting is
// reported, all at once, and that New refuses the configuration.
func TestValidateRefusesBadSettings(t *testing.T) {
	cfg := Config{
		MaxBodyBytes:   -1,
		GatewayTimeout: -time.Second,
		Strategy:       "random",
		Failover:       "hope",
		IPLimitRefill:  -1,
		MaxHeld:        -5,
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	for _, want := range []string{"MaxBodyBytes", "GatewayTimeout", `lb_strategy "random"`, `failover "hope"`, "IPLimitRefill", "MaxHeld"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, does not name %s", err, want)
		}
	}
	if _, err := New(cfg); err == nil {
		t.Error("New(bad config) error = nil")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v, want nil: the zero value routes", err)
	}
}
