package server_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/autoscale"
	"github.com/aperio-dev/aperio/internal/server"
	"github.com/aperio-dev/aperio/internal/visitor/stale"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestDefaultConfigValidates proves the server's defaults are the
// packages' own, passed through rather than copied, and valid once the
// one required value, the master token, is set.
func TestDefaultConfigValidates(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "server.token is required") {
		t.Errorf("DefaultConfig().Validate() = %v, want the missing token named", err)
	}
	cfg.Token = "token-0123456789abcdef"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("DefaultConfig() with a token: Validate() = %v, want nil", err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"Router", cfg.Router, router.DefaultConfig()},
		{"Tunnel", cfg.Tunnel, tunnel.DefaultServerConfig()},
		{"Cache", cfg.Cache, stale.DefaultConfig()},
		{"Scaling", cfg.Scaling, autoscale.DefaultConfig()},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("DefaultConfig().%s = %+v, want the package's DefaultConfig %+v", tc.name, tc.got, tc.want)
		}
	}
}

// TestValidateRefusesBadSettings proves a bad setting of any package
// inside the gateway's configuration is reported, with the gateway's own,
// all at once.
func TestValidateRefusesBadSettings(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Token = "token-0123456789abcdef"
	cfg.Router.Strategy = "random"
	cfg.Tunnel.MaxStreams = 1
	cfg.Cache.MaxBytes = -1
	cfg.Scaling.MaxQueued = -1
	cfg.ShutdownTimeout = -time.Second
	cfg.TLSCert = "cert.pem"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	for _, want := range []string{"router: unknown lb_strategy", "tunnel: MaxStreams", "cache: MaxBytes", "autoscale: max queued", "shutdown_timeout", "tls_cert and tls_key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, does not say %q", err, want)
		}
	}
	if _, err := server.New(t.Context(), cfg, server.Options{}); err == nil {
		t.Error("gateway.New(bad config) error = nil")
	}
}

// TestNewFailsCleanly: a New that fails after it built the autoscaling
// controller (here on a certificate file that is not there) stops the
// controller's owner goroutine; the package's TestMain leak check fails
// the run otherwise.
func TestNewFailsCleanly(t *testing.T) {
	t.Parallel()
	cfg := serverConfig(t)
	cfg.ScalingEnabled = true
	dir := t.TempDir()
	cfg.TLSCert, cfg.TLSKey = filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want the missing files found only by New", err)
	}
	g, err := server.New(t.Context(), cfg, server.Options{Logger: testLogger()})
	if err == nil {
		t.Fatalf("New() with missing certificate files = %v, nil error", g)
	}
	if !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("New() = %v, want it to name the certificate file", err)
	}
}
