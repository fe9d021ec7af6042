package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// TestRefusalsGiveUp: the client gives up only when every server has
// refused the tunnel for good three times in a row; a network error, a
// refusal that may pass or a session in between starts a server's count
// again.
func TestRefusalsGiveUp(t *testing.T) {
	token := &tunnel.RefusedError{Status: 401, Reason: "invalid token", Code: tunnel.RefusalToken, Permanent: true}
	full := &tunnel.RefusedError{Reason: "server is full"}
	network := errors.New("dial tcp: connection refused")

	r := newRefusals(2)
	steps := []struct {
		tunnel int
		err    error
		giveUp bool
	}{
		{0, token, false},
		{0, token, false},
		{0, token, false}, // server 0 has had enough, server 1 has not
		{1, token, false},
		{1, network, false}, // starts server 1 again
		{1, token, false},
		{1, full, false}, // not permanent: starts it again
		{1, token, false},
		{1, token, false},
		{1, token, true},
		{0, nil, false}, // a session on server 0
		{1, token, false},
	}
	for i, s := range steps {
		err := r.attempt(s.tunnel, s.err)
		if got := err != nil; got != s.giveUp {
			t.Fatalf("step %d: attempt(%d, %v) = %v, want give up %v", i, s.tunnel, s.err, err, s.giveUp)
		}
		if err != nil && (!errors.Is(err, ErrRefused) || RefusalHint(err) == "") {
			t.Fatalf("step %d: give-up error %v, want ErrRefused with a hint", i, err)
		}
	}
}

func TestRefusalHint(t *testing.T) {
	tests := []struct {
		err  error
		want string // a part of the hint; "" for none
	}{
		{&tunnel.RefusedError{Code: tunnel.RefusalToken, Permanent: true}, "aperio-client api tokens create"},
		{&tunnel.RefusedError{Code: tunnel.RefusalHostname, Permanent: true}, "hostnames the token lists"},
		{&tunnel.RefusedError{Code: tunnel.RefusalVersion, Permanent: true}, "protocol version"},
		{&tunnel.RefusedError{Code: "something-new", Permanent: true}, "for good"},
		{&tunnel.RefusedError{Reason: "server is full"}, ""},
		{errors.New("dial tcp: connection refused"), ""},
	}
	for _, tt := range tests {
		got := RefusalHint(tt.err)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("RefusalHint(%v) = %q, want one containing %q", tt.err, got, tt.want)
		}
	}
}

func TestPublicURLs(t *testing.T) {
	services := []config.Service{
		{Target: "http://localhost:3000", Hostnames: []string{"app.example.com", "www.example.com"}},
		{Target: "http://localhost:4000", Hostnames: []string{"app.example.com"}, Path: "/api"},
		{Target: "unix:///run/app.sock"},
	}
	tests := []struct {
		server string
		want   []string
	}{
		{"https://tunnel.example.com", []string{
			"https://app.example.com → http://localhost:3000",
			"https://www.example.com → http://localhost:3000",
			"https://app.example.com/api → http://localhost:4000",
			"https://<the token's hostnames> → unix:///run/app.sock",
		}},
		{"wss://tunnel.example.com:443/base", []string{
			"https://app.example.com → http://localhost:3000",
			"https://www.example.com → http://localhost:3000",
			"https://app.example.com/api → http://localhost:4000",
			"https://<the token's hostnames> → unix:///run/app.sock",
		}},
		{"http://127.0.0.1:8080", []string{
			"http://app.example.com:8080 → http://localhost:3000",
			"http://www.example.com:8080 → http://localhost:3000",
			"http://app.example.com:8080/api → http://localhost:4000",
			"http://<the token's hostnames>:8080 → unix:///run/app.sock",
		}},
	}
	for _, tt := range tests {
		if got := publicURLs(tt.server, services); !slices.Equal(got, tt.want) {
			t.Errorf("publicURLs(%s) = %q, want %q", tt.server, got, tt.want)
		}
	}
}
