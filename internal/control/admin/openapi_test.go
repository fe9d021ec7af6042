package admin_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/aperio-dev/aperio/internal/control/admin"
	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// openAPIDoc is the part of the OpenAPI document the checks read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Servers []struct {
		URL string `json:"url"`
	} `json:"servers"`
	Paths map[string]map[string]struct {
		OperationID string                     `json:"operationId"`
		Role        string                     `json:"x-aperio-role"`
		Responses   map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

// fetchOpenAPI reads GET /openapi.json, without credentials.
func fetchOpenAPI(tb testing.TB, f *fixture) openAPIDoc {
	tb.Helper()
	var doc openAPIDoc
	f.expect(tb, "GET", "/openapi.json", "", "", http.StatusOK, &doc)
	return doc
}

// TestOpenAPIMatchesRoutes walks the router and fails when a route is
// missing from the document, or the document describes a route that does
// not exist, or names another minimum role than the route enforces.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f := newFixture(t)
	doc := fetchOpenAPI(t, f)
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi = %q, want 3.0.x", doc.OpenAPI)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != admin.Prefix {
		t.Errorf("servers = %+v, want %s alone", doc.Servers, admin.Prefix)
	}

	api, err := admin.New(admin.Config{MasterToken: masterToken, Store: f.db})
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	err = chi.Walk(api.RoutesForTest(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		rel, ok := strings.CutPrefix(route, admin.Prefix)
		if !ok {
			t.Errorf("route %s %s is outside %s", method, route, admin.Prefix)
		}
		routes[method+" "+rel] = true
		return nil
	})
	if err != nil {
		t.Fatalf("chi.Walk: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			if op.OperationID == "" {
				t.Errorf("%s has no operationId", key)
			}
			if len(op.Responses) == 0 {
				t.Errorf("%s has no responses", key)
			}
		}
	}
	for _, r := range slices.Sorted(maps.Keys(routes)) {
		if !documented[r] {
			t.Errorf("route %s is missing from openapi.json", r)
		}
	}
	for _, d := range slices.Sorted(maps.Keys(documented)) {
		if !routes[d] {
			t.Errorf("openapi.json describes %s, which is not a route", d)
		}
	}

	roles := api.RolesForTest()
	if len(roles) != len(routes) {
		t.Errorf("route table has %d routes, the router %d", len(roles), len(routes))
	}
	for key, want := range roles {
		method, path, _ := strings.Cut(key, " ")
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			continue // reported above
		}
		if op.Role != want {
			t.Errorf("openapi.json: x-aperio-role of %s = %q, the route needs %q", key, op.Role, want)
		}
		if _, ok := op.Responses["401"]; ok != (want != "none") {
			t.Errorf("openapi.json: %s documents 401 = %v, want %v", key, ok, want != "none")
		}
	}
}

// TestOpenAPIClientSchema fails when the Client schema's properties (and
// its concurrency object's) differ from the JSON fields GET /clients
// writes.
func TestOpenAPIClientSchema(t *testing.T) {
	f := newFixture(t)
	type schema struct {
		Required   []string          `json:"required"`
		Properties map[string]schema `json:"properties"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	f.expect(t, "GET", "/openapi.json", "", "", http.StatusOK, &doc)
	fields := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	client := doc.Components.Schemas["Client"]
	for _, c := range []struct {
		what string
		s    schema
		want []string
	}{
		{"Client", client, fields(admin.ClientInfo{})},
		{"Client.concurrency", client.Properties["concurrency"], fields(admin.Concurrency{})},
	} {
		props := slices.Sorted(maps.Keys(c.s.Properties))
		if !slices.Equal(props, c.want) {
			t.Errorf("openapi.json %s properties = %q, want the wire fields %q", c.what, props, c.want)
		}
		if req := slices.Sorted(slices.Values(c.s.Required)); !slices.Equal(req, c.want) {
			t.Errorf("openapi.json %s required = %q, want %q", c.what, req, c.want)
		}
	}
}

// TestOpenAPIScalingDetailSchema fails when the ScalingDecision,
// ScalingPoint and WebhookDelivery schemas' properties differ from the
// JSON fields GET /scaling/{id} and GET /webhooks/{id}/deliveries write,
// or require one that may be left out.
func TestOpenAPIScalingDetailSchema(t *testing.T) {
	f := newFixture(t)
	type schema struct {
		Required   []string          `json:"required"`
		Properties map[string]schema `json:"properties"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	f.expect(t, "GET", "/openapi.json", "", "", http.StatusOK, &doc)
	// fields returns v's JSON names, and those not omitempty.
	fields := func(v any) (all, required []string) {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			all = append(all, name)
			if opts != "omitempty" {
				required = append(required, name)
			}
		}
		slices.Sort(all)
		slices.Sort(required)
		return all, required
	}
	for name, v := range map[string]any{"ScalingDecision": apitype.ScalingDecision{}, "ScalingPoint": apitype.ScalingPoint{}, "WebhookDelivery": apitype.WebhookDelivery{}} {
		s := doc.Components.Schemas[name]
		all, required := fields(v)
		if props := slices.Sorted(maps.Keys(s.Properties)); !slices.Equal(props, all) {
			t.Errorf("openapi.json %s properties = %q, want the wire fields %q", name, props, all)
		}
		if req := slices.Sorted(slices.Values(s.Required)); !slices.Equal(req, required) {
			t.Errorf("openapi.json %s required = %q, want %q", name, req, required)
		}
	}
}
