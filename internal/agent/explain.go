package agent

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/tunnel"
)

// ErrRefused is wrapped by the error Run returns when every server refused
// the tunnel permanently (a token refused, no hostname allowed, another
// protocol version) giveUpAfter times in a row and retry_forever is off.
// The error wraps the last *tunnel.RefusedError too.
var ErrRefused = errors.New("agent: every server refused the tunnel")

// giveUpAfter is how many permanent refusals in a row, from every server,
// make the client give up: one could be a server's passing mistake (a
// token just created on another server whose feed lags), three are not.
// With the reconnect backoff they take a few seconds.
const giveUpAfter = 3

// refusals counts each tunnel's permanent refusals in a row and tells
// when every tunnel has reached giveUpAfter. It is safe for concurrent
// use: each tunnel's Run reports from its own goroutine.
type refusals struct {
	mu   sync.Mutex // guards the following fields
	runs []int      // by tunnel index; reset by a session or any other error
	last error      // the last permanent refusal
}

func newRefusals(tunnels int) *refusals { return &refusals{runs: make([]int, tunnels)} }

// attempt records how one attempt of tunnel i ended (nil: it connected)
// and returns the error to give up with once every tunnel has been
// refused permanently giveUpAfter times in a row, nil until then.
func (r *refusals) attempt(i int, err error) error {
	var refused *tunnel.RefusedError
	r.mu.Lock()
	defer r.mu.Unlock()
	if !errors.As(err, &refused) || !refused.Permanent {
		r.runs[i] = 0
		return nil
	}
	r.runs[i]++
	r.last = refused
	for _, n := range r.runs {
		if n < giveUpAfter {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrRefused, r.last)
}

// RefusalHint says what to do about err, a tunnel refusal (or an error
// wrapping one), in one sentence for the operator; "" when err is no
// permanent refusal.
func RefusalHint(err error) string {
	var refused *tunnel.RefusedError
	if !errors.As(err, &refused) || !refused.Permanent {
		return ""
	}
	switch refused.Code {
	case tunnel.RefusalToken:
		return "the token was refused (unknown, revoked or expired): mint a new one with `aperio-client api tokens create` and set APERIO_SERVER_TOKEN (server.token)"
	case tunnel.RefusalHostname:
		return "no hostname of this client may be bound with its token: use the hostnames the token lists (`aperio-client api tokens list`), or a token, or an organization, that allows them"
	case tunnel.RefusalVersion:
		return "the server speaks another tunnel protocol version: install the aperio-client release that matches the server"
	}
	return "the server refused the tunnel for good: fix what its reason names"
}

// publicURLs lists, for each hostname and path each service binds, the
// URL visitors reach it at through the server at serverURL, and the
// target it is forwarded to: "https://app.example.com/api →
// http://localhost:3000". The scheme is the server's (https for https
// and wss, http otherwise), and so is a port other than the scheme's
// default. A service with no hostname binds the token's (auto-bind).
func publicURLs(serverURL string, services []config.Service) []string {
	scheme, port := "http", ""
	if u, err := url.Parse(serverURL); err == nil {
		if u.Scheme == "https" || u.Scheme == "wss" {
			scheme = "https"
		}
		if p := u.Port(); p != "" && !(scheme == "https" && p == "443") && !(scheme == "http" && p == "80") {
			port = ":" + p
		}
	}
	var out []string
	for _, sc := range services {
		hosts := sc.Hostnames
		if len(hosts) == 0 {
			hosts = []string{"<the token's hostnames>"}
		}
		for _, h := range hosts {
			out = append(out, scheme+"://"+h+port+strings.TrimSuffix(sc.Path, "/")+" → "+sc.Target)
		}
	}
	return out
}
