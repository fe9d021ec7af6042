package oidc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{
		Issuer:       "https://login.example.com",
		ClientID:     "aperio",
		ClientSecret: "secret",
		HTTPClient:   &http.Client{Transport: &http.Transport{}},
		Keys:         []Key{testKey(1, "a")},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("Validate(valid) = %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no issuer", func(c *Config) { c.Issuer = "" }},
		{"relative issuer", func(c *Config) { c.Issuer = "login.example.com" }},
		{"http issuer", func(c *Config) { c.Issuer = "http://login.example.com" }},
		{"issuer with query", func(c *Config) { c.Issuer = "https://login.example.com/?x=1" }},
		{"issuer with credentials", func(c *Config) { c.Issuer = "https://u:p@login.example.com" }},
		{"issuer not a URL", func(c *Config) { c.Issuer = "https://login.example.com/%zz" }},
		{"no client id", func(c *Config) { c.ClientID = "" }},
		{"no client secret", func(c *Config) { c.ClientSecret = "" }},
		{"scopes without openid", func(c *Config) { c.Scopes = []string{"email"} }},
		{"redirect url other path", func(c *Config) { c.RedirectURL = "https://aperio.example.com/callback" }},
		{"redirect url relative", func(c *Config) { c.RedirectURL = CallbackPath }},
		{"redirect url with query", func(c *Config) { c.RedirectURL = "https://aperio.example.com" + CallbackPath + "?x=1" }},
		{"no http client", func(c *Config) { c.HTTPClient = nil }},
		{"http client without transport", func(c *Config) { c.HTTPClient = &http.Client{} }},
		{"no keys", func(c *Config) { c.Keys = nil }},
		{"session ttl above max", func(c *Config) { c.SessionTTL = MaxSessionTTL + time.Second }},
		{"session ttl negative", func(c *Config) { c.SessionTTL = -time.Hour }},
		{"login ttl above max", func(c *Config) { c.LoginTTL = 2 * time.Hour }},
		{"timeout above max", func(c *Config) { c.Timeout = time.Hour }},
		{"timeout below a second", func(c *Config) { c.Timeout = time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want ErrConfig", err)
			}
			p, err := New(t.Context(), c)
			if !errors.Is(err, ErrConfig) || p != nil {
				t.Errorf("New = %v, %v; want nil, ErrConfig", p, err)
			}
		})
	}
	c := validConfig()
	c.Issuer, c.ClientID, c.Keys = "", "", nil
	if err := c.Validate(); strings.Count(err.Error(), "\n") < 2 {
		t.Errorf("Validate with three problems = %q, want each reported", err)
	}
	c = validConfig()
	c.Issuer, c.AllowHTTP = "http://login.internal", true
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(http issuer, AllowHTTP) = %v, want nil", err)
	}
}

// countingTransport counts the requests of the client it is given to.
type countingTransport struct {
	n    atomic.Int64
	base http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// discoveryServer answers the discovery path with handle.
func discoveryServer(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, issuer string)) (issuer string) {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		handle(w, r, srv.URL)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func discovery(issuer string) string {
	return fmt.Sprintf(`{"issuer":%q,"authorization_endpoint":%q,"token_endpoint":%q,"jwks_uri":%q,"id_token_signing_alg_values_supported":["RS256"]}`,
		issuer, issuer+"/authorize", issuer+"/token", issuer+"/jwks")
}

func TestNewDiscovers(t *testing.T) {
	issuer := discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, iss string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, discovery(iss))
	})
	ct := &countingTransport{base: &http.Transport{}}
	c := validConfig()
	c.Issuer, c.AllowHTTP, c.HTTPClient = issuer, true, &http.Client{Transport: ct}
	p, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if ct.n.Load() != 1 {
		t.Errorf("the given client made %d calls, want the discovery through it", ct.n.Load())
	}
	if p.oauth.Endpoint.AuthURL != issuer+"/authorize" || p.oauth.Endpoint.TokenURL != issuer+"/token" {
		t.Errorf("endpoints %+v, want the discovered ones", p.oauth.Endpoint)
	}
	if len(p.oauth.Scopes) != 3 || p.cfg.SessionTTL != DefaultSessionTTL || p.cfg.LoginTTL != DefaultLoginTTL {
		t.Errorf("defaults not applied: scopes %q, session %v, login %v", p.oauth.Scopes, p.cfg.SessionTTL, p.cfg.LoginTTL)
	}
}

func TestNewDiscoveryFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	other := discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, iss string) { io.WriteString(w, discovery(iss)) })
	for _, tc := range []struct {
		name   string
		issuer string
	}{
		{"unreachable", closed},
		{"answers 500", discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, _ string) {
			http.Error(w, "down", http.StatusInternalServerError)
		})},
		{"not JSON", discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, _ string) { io.WriteString(w, "<html>") })},
		{"another issuer", discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, _ string) {
			io.WriteString(w, discovery("https://evil.example"))
		})},
		{"redirect not followed", discoveryServer(t, func(w http.ResponseWriter, r *http.Request, _ string) {
			http.Redirect(w, r, other+"/.well-known/openid-configuration", http.StatusFound)
		})},
		{"endpoint not http", discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, iss string) {
			io.WriteString(w, strings.Replace(discovery(iss), iss+"/authorize", "javascript:alert(1)", 1))
		})},
		{"body beyond the bound", discoveryServer(t, func(w http.ResponseWriter, _ *http.Request, iss string) {
			d := discovery(iss)
			io.WriteString(w, d[:len(d)-1]+`,"pad":"`+strings.Repeat("x", MaxResponseBytes)+`"}`)
		})},
		{"hangs", discoveryServer(t, func(w http.ResponseWriter, r *http.Request, _ string) { <-r.Context().Done() })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.Issuer, c.AllowHTTP, c.Timeout = tc.issuer, true, time.Second
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c.HTTPClient = &http.Client{Transport: tr}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			p, err := New(ctx, c)
			if !errors.Is(err, ErrDiscovery) || p != nil {
				t.Errorf("New = %v, %v; want nil, ErrDiscovery", p, err)
			}
		})
	}
}

func TestBoundedTransport(t *testing.T) {
	for _, tc := range []struct {
		size int
		want error
	}{
		{MaxResponseBytes, nil},
		{MaxResponseBytes + 1, errTooLarge},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Write(bytes.Repeat([]byte{'x'}, tc.size))
		}))
		tr := &http.Transport{}
		c := &http.Client{Transport: boundedTransport{base: tr}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		srv.Close()
		if !errors.Is(err, tc.want) || (tc.want == nil && len(b) != tc.size) {
			t.Errorf("body of %d bytes: read %d, %v; want %v", tc.size, len(b), err, tc.want)
		}
	}
}
