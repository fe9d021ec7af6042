package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// TestClient drives every method of Client against a real server.
func TestClient(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	master := &apiclient.Client{URL: f.url, Key: masterToken}

	org, err := master.CreateOrg(ctx, "acme")
	if err != nil || org.Name != "acme" {
		t.Fatalf("CreateOrg(acme) = %+v, %v", org, err)
	}
	k, err := master.CreateKey(ctx, admin.CreateKeyRequest{Name: "ops", Role: admin.RoleAdmin, OrgID: org.ID})
	if err != nil || !strings.HasPrefix(k.Secret, "apk_") || k.OrgID != org.ID {
		t.Fatalf("CreateKey = %+v, %v, want an apk_ key in %s", k, err, org.ID)
	}
	owned, err := master.SetOrgHostnames(ctx, org.ID, []string{"App.example.com", "*.app.example.com"})
	if err != nil || !slices.Equal(owned.Patterns, []string{"*.app.example.com", "app.example.com"}) || owned.OrgID != org.ID {
		t.Fatalf("SetOrgHostnames = %+v, %v", owned, err)
	}
	// A key given as a ws:// URL with a trailing slash still reaches the API.
	if got, err := (&apiclient.Client{URL: f.url, Key: k.Secret}).OrgHostnames(ctx, org.ID); err != nil || !slices.Equal(got.Patterns, owned.Patterns) {
		t.Errorf("OrgHostnames = %+v, %v, want %v", got, err, owned.Patterns)
	}

	c := &apiclient.Client{URL: strings.Replace(f.url, "http://", "ws://", 1) + "/", Key: k.Secret}

	expires := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	tok, err := c.CreateToken(ctx, admin.CreateTokenRequest{
		Name: "web", Hostnames: []string{"app.example.com"}, AllowedIPs: []string{"10.0.0.0/8"}, ExpiresAt: &expires,
	})
	if err != nil || !strings.HasPrefix(tok.Secret, "apr_") || !tok.ExpiresAt.Equal(expires) {
		t.Fatalf("CreateToken = %+v, %v", tok, err)
	}
	toks, err := c.Tokens(ctx)
	if err != nil || len(toks) != 1 || toks[0].ID != tok.ID {
		t.Errorf("Tokens = %+v, %v, want %s", toks, err, tok.ID)
	}
	revoked, err := c.RevokeToken(ctx, tok.ID)
	if err != nil || revoked.Status != admin.TokenRevoked {
		t.Errorf("RevokeToken = %+v, %v, want revoked", revoked, err)
	}
	keys, err := c.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID {
		t.Errorf("Keys = %+v, %v, want %s", keys, err, k.ID)
	}
	if err := c.SetMaintenance(ctx, "app.example.com", apitype.MaintenanceRequest{}); err != nil {
		t.Errorf("SetMaintenance: %v", err)
	}
	if err := master.SetMaintenance(ctx, "other.app.example.com", apitype.MaintenanceRequest{OrgID: org.ID}); err != nil {
		t.Errorf("SetMaintenance as master with org: %v", err)
	}
	ms, err := c.Maintenance(ctx)
	if err != nil || len(ms) != 2 || ms[0].Hostname != "other.app.example.com" {
		t.Errorf("Maintenance = %+v, %v, want other.app.example.com then app.example.com", ms, err)
	}
	if err := c.ClearMaintenance(ctx, "app.example.com"); err != nil {
		t.Errorf("ClearMaintenance: %v", err)
	}
	f.clients.set(admin.ClientInfo{ID: "c1", OrgID: org.ID}, admin.ClientInfo{ID: "c2"})
	cs, err := c.Clients(ctx)
	if err != nil || len(cs) != 1 || cs[0].ID != "c1" {
		t.Errorf("Clients = %+v, %v, want c1 alone", cs, err)
	}
	orgs, err := c.Orgs(ctx)
	if err != nil || len(orgs) != 1 || orgs[0].ID != org.ID {
		t.Errorf("Orgs = %+v, %v, want acme", orgs, err)
	}
	es, err := c.Audit(ctx, 3)
	if err != nil || len(es) != 3 || es[0].Event != admin.EventMaintenanceOff {
		t.Errorf("Audit(3) = %+v, %v, want 3 entries, maintenance_off first", es, err)
	}
	other, err := c.CreateKey(ctx, admin.CreateKeyRequest{Name: "tmp", Role: admin.RoleViewer})
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if err := c.DeleteKey(ctx, other.ID); err != nil {
		t.Errorf("DeleteKey: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		c       *apiclient.Client
		call    func(*apiclient.Client) error
		status  int // 0: not a ResponseError
		message string
	}{
		{"wrong key", &apiclient.Client{URL: f.url, Key: "apk_x"},
			func(c *apiclient.Client) error { _, err := c.Tokens(ctx); return err },
			401, "missing or invalid credentials"},
		{"bad input", &apiclient.Client{URL: f.url, Key: masterToken},
			func(c *apiclient.Client) error {
				_, err := c.CreateToken(ctx, admin.CreateTokenRequest{Name: "x", Hostnames: []string{"bad host"}})
				return err
			},
			400, `hostnames[0]: invalid hostname "bad host"`},
		{"not found", &apiclient.Client{URL: f.url, Key: masterToken},
			func(c *apiclient.Client) error { return c.DeleteKey(ctx, "key_nope") },
			404, `admin key "key_nope" not found`},
		{"no URL", &apiclient.Client{Key: masterToken},
			func(c *apiclient.Client) error { _, err := c.Orgs(ctx); return err },
			0, "admin: no server URL"},
		{"bad scheme", &apiclient.Client{URL: "ftp://x", Key: masterToken},
			func(c *apiclient.Client) error { _, err := c.Orgs(ctx); return err },
			0, "scheme must be http, https, ws or wss"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(tt.c)
			var re *apiclient.ResponseError
			switch {
			case err == nil:
				t.Fatalf("call = nil error, want %q", tt.message)
			case tt.status == 0 && errors.As(err, &re):
				t.Fatalf("call = %v, want an error before any request", err)
			case tt.status == 0:
				if !strings.Contains(err.Error(), tt.message) {
					t.Errorf("call = %q, want %q", err, tt.message)
				}
			case !errors.As(err, &re):
				t.Fatalf("call = %v (%T), want a *ResponseError", err, err)
			case re.StatusCode != tt.status || re.Message != tt.message && !strings.HasPrefix(re.Message, tt.message):
				t.Errorf("call = %d %q, want %d %q", re.StatusCode, re.Message, tt.status, tt.message)
			}
		})
	}
}

func TestResponseErrorWithoutJSON(t *testing.T) {
	f := newFixture(t)
	// Outside the API the server's mux answers in plain text.
	c := &apiclient.Client{URL: f.url + "/elsewhere", Key: masterToken}
	_, err := c.Orgs(context.Background())
	var re *apiclient.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusNotFound || re.Message != "404 page not found" {
		t.Fatalf("Orgs at a wrong base = %v, want 404 with the plain-text body", err)
	}
}

// TestClientScaling drives Client's scaling methods, and checks that
// ScalingRecord mirrors the server's JSON: decoding and encoding it again
// gives the server's bytes back.
func TestClientScaling(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	org := f.org(t, "acme")
	k := f.key(t, org, admin.RoleOperator)
	unmeasured := scalingView("scl_2", org, "cold.example.com", 1)
	unmeasured.Capacity, unmeasured.LastCallAt = 0, nil
	f.scaling.set(scalingView("scl_1", org, "app.example.com", 0), unmeasured)
	c := &apiclient.Client{URL: f.url, Key: k.Secret}

	recs, err := c.Scaling(ctx)
	if err != nil || len(recs) != 2 || recs[0].ID != "scl_2" || recs[1].ID != "scl_1" {
		t.Fatalf("Scaling = %+v, %v, want scl_2 then scl_1", recs, err)
	}
	if u := recs[1].Utilization; u == nil || *u != 0.85 || recs[0].Utilization != nil {
		t.Errorf("Scaling utilizations = %v, %v, want nil and 0.85", recs[0].Utilization, u)
	}
	if r := recs[1]; r.ColdStart != "45s" || r.Cooldown != "1m0s" || r.LastCallAt == nil || r.LastStatus != 502 || !r.Authenticated {
		t.Errorf("Scaling()[1] = %+v, want cold_start 45s, cooldown 1m0s, a last call answered 502, authenticated", r)
	}
	_, raw := f.call(t, "GET", "/scaling", k.Secret, "")
	again, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(again)+"\n", string(raw); got != want {
		t.Errorf("ScalingRecords encoded again =\n%s\nwant the server's\n%s", got, want)
	}

	if err := c.DisarmScaling(ctx, "scl_1"); err != nil {
		t.Errorf("DisarmScaling(scl_1) = %v", err)
	}
	if got := f.scaling.disarmCalls(); len(got) != 1 || got[0] != org+"/scl_1" {
		t.Errorf("Disarm calls = %q, want %s/scl_1", got, org)
	}
	var re *apiclient.ResponseError
	if err := c.DisarmScaling(ctx, "scl_1"); !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		t.Errorf("second DisarmScaling(scl_1) = %v, want a 404 ResponseError", err)
	}
}
