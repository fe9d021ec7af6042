package tunnel

import (
	"errors"
	"fmt"
	"time"
)

// DefaultServerConfig returns the server's default tunnel settings, the one
// place they are written: a 15s down threshold (heartbeats every 5s), a 30s
// wait for a response head, the protocol's HandshakeTimeout,
// DefaultMaxHeaderBytes, DefaultMaxStreams, DefaultAnnounceInterval and
// at most 10000 sessions (max_tunnels). Auth, Registry and Logger are nil.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		DownThreshold:         15 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		HandshakeTimeout:      HandshakeTimeout,
		MaxHeaderBytes:        DefaultMaxHeaderBytes,
		MaxStreams:            DefaultMaxStreams,
		AnnounceInterval:      DefaultAnnounceInterval,
		MaxSessions:           10000,
	}
}

// Validate reports every problem of cfg's settings, joined; nil when there
// is none. Zero settings are valid (each means its default); Auth and
// Registry, which NewServer requires, are not settings.
func (cfg ServerConfig) Validate() error {
	var errs []error
	negative := func(name string, bad bool, v any) {
		if bad {
			errs = append(errs, fmt.Errorf("tunnel: %s must not be negative, got %v", name, v))
		}
	}
	negative("DownThreshold", cfg.DownThreshold < 0, cfg.DownThreshold)
	negative("ResponseHeaderTimeout", cfg.ResponseHeaderTimeout < 0, cfg.ResponseHeaderTimeout)
	negative("HandshakeTimeout", cfg.HandshakeTimeout < 0, cfg.HandshakeTimeout)
	negative("MaxHeaderBytes", cfg.MaxHeaderBytes < 0, cfg.MaxHeaderBytes)
	negative("AnnounceInterval", cfg.AnnounceInterval < 0, cfg.AnnounceInterval)
	negative("MaxSessions", cfg.MaxSessions < 0, cfg.MaxSessions)
	if cfg.MaxStreams != 0 && cfg.MaxStreams < 2 {
		errs = append(errs, fmt.Errorf("tunnel: MaxStreams must be 0 or at least 2 (control stream plus one), got %d", cfg.MaxStreams))
	}
	return errors.Join(errs...)
}

// DefaultClientConfig returns the client's default tunnel settings:
// DefaultMaxHeaderBytes. URL, Token, Announce and Forwarder are empty.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{MaxHeaderBytes: DefaultMaxHeaderBytes}
}

// Validate reports every problem of cfg's settings; nil when there is
// none. The required fields NewClient checks are not settings.
func (cfg ClientConfig) Validate() error {
	if cfg.MaxHeaderBytes < 0 {
		return fmt.Errorf("tunnel: MaxHeaderBytes must not be negative, got %d", cfg.MaxHeaderBytes)
	}
	switch cfg.Transport {
	case "", TransportWebSocket, TransportTCP:
	default:
		return fmt.Errorf("tunnel: Transport must be %q or %q, got %q", TransportWebSocket, TransportTCP, cfg.Transport)
	}
	return nil
}

// defaultHeartbeat is the heartbeat interval of the default down
// threshold: three beats fit in it, so one lost beat never drops a client.
func defaultHeartbeat() time.Duration {
	return DefaultServerConfig().DownThreshold / heartbeatsPerThreshold
}
