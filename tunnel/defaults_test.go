package tunnel

import (
	"strings"
	"testing"
	"time"
)

// TestDefaultConfigsValidate proves both sides' defaults are valid, and
// that the client's fallback heartbeat is the one the default server asks
// for.
func TestDefaultConfigsValidate(t *testing.T) {
	if err := DefaultServerConfig().Validate(); err != nil {
		t.Errorf("DefaultServerConfig().Validate() = %v, want nil", err)
	}
	if err := DefaultClientConfig().Validate(); err != nil {
		t.Errorf("DefaultClientConfig().Validate() = %v, want nil", err)
	}
	s, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: newFakeRegistry()})
	if err != nil {
		t.Fatalf("NewServer(zero settings) = %v", err)
	}
	if got, want := s.heartbeatInterval(), defaultHeartbeat(); got != want {
		t.Errorf("heartbeat of a server with default settings = %v, client fallback %v: want equal", got, want)
	}
	if s.cfg.MaxStreams != DefaultMaxStreams || s.cfg.DownThreshold != DefaultServerConfig().DownThreshold {
		t.Errorf("NewServer(zero settings) cfg = %+v, want DefaultServerConfig's settings", s.cfg)
	}
}

// TestValidateRefusesBadSettings proves negative settings and a stream
// bound with no room for a data stream are refused by the constructors.
func TestValidateRefusesBadSettings(t *testing.T) {
	_, err := NewServer(ServerConfig{Auth: tokenAuth{}, Registry: newFakeRegistry(), DownThreshold: -time.Second, MaxStreams: 1, MaxHeaderBytes: -1})
	if err == nil {
		t.Fatal("NewServer(bad settings) error = nil")
	}
	for _, want := range []string{"DownThreshold", "MaxStreams", "MaxHeaderBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewServer error %q does not name %s", err, want)
		}
	}
	if err := (ClientConfig{MaxHeaderBytes: -1}).Validate(); err == nil {
		t.Error("ClientConfig{MaxHeaderBytes: -1}.Validate() = nil, want an error")
	}
}
