package server_test

import (
	"context"
	"errors"
	"github.com/aperio-dev/aperio/internal/server/servertest"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/tunnel"
)

// TestClientsShowVersion: GET /clients shows the release a client
// announced, "" for a client that announces none (one that predates the
// field), and a client announcing an unbounded or unprintable version is
// refused at its handshake rather than shown.
func TestClientsShowVersion(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Config(t), nil, nil)
	connect := func(name, version string) error {
		t.Helper()
		first := make(chan error, 1) // nil on connecting, the error of a refused handshake
		ctx, cancel := context.WithCancel(t.Context())
		c, err := tunnel.NewClient(tunnel.ClientConfig{
			URL: s.URL, Token: servertest.Token, Forwarder: servertest.NopForwarder{}, Logger: servertest.Logger(),
			Announce: func() tunnel.Announcement {
				return tunnel.Announcement{Name: name, InstanceID: "i-" + name, Version: version,
					Services: []tunnel.Service{{ID: "0", Hostnames: []string{name + ".test"}, Healthy: true}}}
			},
			OnConnect: func(string) {
				select {
				case first <- nil:
				default:
				}
			},
			OnDisconnect: func(err error) {
				if err == nil {
					err = errors.New("disconnected")
				}
				select {
				case first <- err:
				default:
				}
			},
		})
		if err != nil {
			cancel()
			t.Fatalf("tunnel.NewClient() = %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case err := <-first:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := connect("current", "v1.4.0-rc.1"); err != nil {
		t.Fatalf("client announcing v1.4.0-rc.1: %v", err)
	}
	if err := connect("older", ""); err != nil {
		t.Fatalf("client announcing no version: %v", err)
	}
	got := map[string]string{}
	for _, c := range servertest.ListClients(t, s) {
		got[c.Name] = c.Version
	}
	if v, ok := got["current"]; !ok || v != "v1.4.0-rc.1" {
		t.Errorf("GET /clients version of current = %q (listed %v), want v1.4.0-rc.1", v, ok)
	}
	if v, ok := got["older"]; !ok || v != "" {
		t.Errorf("GET /clients version of older = %q (listed %v), want \"\"", v, ok)
	}
	for _, bad := range []string{strings.Repeat("9", tunnel.MaxVersionLen+1), "v1\x1b[2J"} {
		if err := connect("hostile", bad); err == nil {
			t.Errorf("a client announcing version %q connected, want it refused", bad)
		}
	}
}
