// Package oidctest runs a real OpenID Connect provider (mockoidc) on
// loopback for tests, and the browser that logs in through it: a client
// with a cookie jar that reaches every *.test hostname at one address.
// Only tests import it.
package oidctest

import (
	"context"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"
)

// Provider is a running mockoidc. It logs in the users queued with
// QueueUser, in order, and its default user (jane.doe@example.com,
// verified) when none is queued. Its handlers run one at a time.
type Provider struct {
	*mockoidc.MockOIDC
	authorize atomic.Int64
}

// Start runs a provider on 127.0.0.1 until the test ends.
func Start(tb testing.TB) *Provider {
	tb.Helper()
	op, err := mockoidc.NewServer(nil)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Provider{MockOIDC: op}
	// mockoidc keeps its sessions in a plain map; one mutex around its
	// handlers orders them for the race detector, as a real provider's
	// storage would.
	var mu sync.Mutex
	if err := op.AddMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if r.URL.Path == mockoidc.AuthorizationEndpoint {
				p.authorize.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if err := op.Start(ln, nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := op.Shutdown(); err != nil {
			tb.Errorf("provider shutdown: %v", err)
		}
	})
	return p
}

// Authorizations returns how many authorization requests the provider
// has seen.
func (p *Provider) Authorizations() int64 { return p.authorize.Load() }

// User returns a verified user with email and groups, for QueueUser.
func User(email string, verified bool, groups ...string) *mockoidc.MockUser {
	return &mockoidc.MockUser{Subject: "sub-" + email, Email: email, EmailVerified: verified, PreferredUsername: email, Groups: groups}
}

// Browser returns a client with a cookie jar, as a browser keeps cookies
// per hostname, that reaches every *.test hostname at addr (host:port)
// and everything else where it is. It follows redirects itself, sending
// the jar's cookies on every hop.
func Browser(tb testing.TB, addr string) *http.Client {
	tb.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		tb.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(a); strings.HasSuffix(host, ".test") {
			a = addr
		}
		var d net.Dialer
		return d.DialContext(ctx, network, a)
	}}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Jar: jar, Timeout: 30 * time.Second}
}
