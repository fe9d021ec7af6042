package apiclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aperio-dev/aperio/internal/control/admin/apiclient"
	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// request is what the fake API saw of one call.
type request struct {
	method, uri, auth, contentType, body string
}

// fakeAPI records each request and answers it with status and body.
func fakeAPI(t testing.TB, status int, body string) (*httptest.Server, <-chan request) {
	t.Helper()
	seen := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request body: %v", err)
		}
		seen <- request{r.Method, r.RequestURI, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(b)}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// TestClientRequests pins what each method sends, with no server behind:
// the route under apitype.Prefix, IDs and hostnames escaped into one path segment,
// the query, the credential and the JSON body.
func TestClientRequests(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		call func(*apiclient.Client) error
		want request
	}{
		{"revoke token", func(c *apiclient.Client) error { _, err := c.RevokeToken(ctx, "tok/1"); return err },
			request{method: "DELETE", uri: "/aperio/api/tokens/tok%2F1"}},
		{"set maintenance for an org", func(c *apiclient.Client) error {
			return c.SetMaintenance(ctx, "app.example.com", apitype.MaintenanceRequest{OrgID: "org_1"})
		},
			request{method: "PUT", uri: "/aperio/api/maintenance/app.example.com", contentType: "application/json", body: `{"org_id":"org_1"}`}},
		{"set maintenance", func(c *apiclient.Client) error {
			return c.SetMaintenance(ctx, "app.example.com", apitype.MaintenanceRequest{})
		},
			request{method: "PUT", uri: "/aperio/api/maintenance/app.example.com"}},
		{"show scaling", func(c *apiclient.Client) error { _, err := c.ScalingRecord(ctx, "scl/1"); return err },
			request{method: "GET", uri: "/aperio/api/scaling/scl%2F1"}},
		{"create scaling", func(c *apiclient.Client) error {
			_, err := c.CreateScaling(ctx, apitype.CreateScalingRequest{Hostname: "app.example.com", URL: "https://p.example/s", Max: 3, ColdStart: "45s"})
			return err
		}, request{method: "POST", uri: "/aperio/api/scaling", contentType: "application/json",
			body: `{"hostname":"app.example.com","url":"https://p.example/s","max":3,"cold_start":"45s"}`}},
		{"disarm scaling", func(c *apiclient.Client) error { return c.DisarmScaling(ctx, "scl 1") },
			request{method: "DELETE", uri: "/aperio/api/scaling/scl%201"}},
		{"audit with a limit", func(c *apiclient.Client) error { _, err := c.Audit(ctx, 5); return err },
			request{method: "GET", uri: "/aperio/api/audit?limit=5"}},
		{"explain", func(c *apiclient.Client) error {
			_, err := c.Explain(ctx, "app.example.com", "/a b", "203.0.113.7")
			return err
		}, request{method: "GET", uri: "/aperio/api/explain?host=app.example.com&ip=203.0.113.7&path=%2Fa+b"}},
		{"create org", func(c *apiclient.Client) error { _, err := c.CreateOrg(ctx, "acme"); return err },
			request{method: "POST", uri: "/aperio/api/orgs", contentType: "application/json", body: `{"name":"acme"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := fakeAPI(t, http.StatusOK, "null") // decodes into a list or a struct
			// A base URL's query and trailing slash are not part of the route.
			c := &apiclient.Client{URL: srv.URL + "/?x=1", Key: "apk_k"}
			if err := tt.call(c); err != nil {
				t.Fatalf("call = %v", err)
			}
			tt.want.auth = "Bearer apk_k"
			if got := <-seen; got != tt.want {
				t.Errorf("request = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestClientAnswers(t *testing.T) {
	ctx := context.Background()
	t.Run("error body", func(t *testing.T) {
		srv, _ := fakeAPI(t, http.StatusConflict, `{"error":"name taken"}`)
		_, err := (&apiclient.Client{URL: srv.URL}).CreateOrg(ctx, "acme")
		var re *apiclient.ResponseError
		if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.Message != "name taken" {
			t.Fatalf("CreateOrg = %v, want a 409 ResponseError saying name taken", err)
		}
	})
	t.Run("empty error body", func(t *testing.T) {
		srv, _ := fakeAPI(t, http.StatusBadGateway, "")
		_, err := (&apiclient.Client{URL: srv.URL}).Orgs(ctx)
		var re *apiclient.ResponseError
		if !errors.As(err, &re) || re.Message != "Bad Gateway" {
			t.Fatalf("Orgs = %v, want a ResponseError with the status text", err)
		}
	})
	t.Run("undecodable answer", func(t *testing.T) {
		srv, _ := fakeAPI(t, http.StatusOK, "<html>")
		_, err := (&apiclient.Client{URL: srv.URL}).Tokens(ctx)
		var re *apiclient.ResponseError
		if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "decode answer to GET /tokens") {
			t.Fatalf("Tokens = %v, want a decode error that is not a ResponseError", err)
		}
	})
	t.Run("answer decoded", func(t *testing.T) {
		srv, _ := fakeAPI(t, http.StatusOK, `{"host":"a.example.com","steps":[{"name":"route","outcome":"stop"}],"status":502}`)
		ex, err := (&apiclient.Client{URL: srv.URL}).Explain(ctx, "a.example.com", "", "")
		if err != nil || ex.Status != 502 || len(ex.Steps) != 1 || ex.Steps[0].Name != apitype.StepRoute || ex.Steps[0].Outcome != apitype.OutcomeStop {
			t.Fatalf("Explain = %+v, %v, want the route step stopping with 502", ex, err)
		}
	})
}
