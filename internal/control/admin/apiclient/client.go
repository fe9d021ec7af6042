package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// maxResponseBytes bounds the response bodies Client reads.
const maxResponseBytes = 32 << 20

// Client calls the admin API of one server, one method per route. Set URL
// and Key; the zero HTTPClient is fine. A Client is safe for concurrent use
// as long as its fields are not changed. Its errors are prefixed "admin:",
// after the API they come from.
type Client struct {
	// URL is the server's base URL, as in server.url
	// (https://tunnel.example.com); Client appends apitype.Prefix. ws:// and wss://
	// stand for http:// and https://.
	URL string
	// Key is the bearer credential: an apk_ admin key or the master token.
	Key string
	// HTTPClient sends the requests. Nil means a client with no timeout of
	// its own: bound the calls with their context.
	HTTPClient *http.Client
}

// ResponseError is an answer of the API other than success.
type ResponseError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Message is the server's "error" text, or the status text when the
	// body had none.
	Message string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("admin: %s (%d %s)", e.Message, e.StatusCode, http.StatusText(e.StatusCode))
}

// Orgs calls GET /orgs.
func (c *Client) Orgs(ctx context.Context) ([]apitype.Org, error) {
	var out []apitype.Org
	return out, c.Do(ctx, http.MethodGet, "/orgs", nil, &out)
}

// CreateOrg calls POST /orgs.
func (c *Client) CreateOrg(ctx context.Context, name string) (apitype.Org, error) {
	var out apitype.Org
	return out, c.Do(ctx, http.MethodPost, "/orgs", apitype.CreateOrgRequest{Name: name}, &out)
}

// Keys calls GET /admin-keys.
func (c *Client) Keys(ctx context.Context) ([]apitype.Key, error) {
	var out []apitype.Key
	return out, c.Do(ctx, http.MethodGet, "/admin-keys", nil, &out)
}

// CreateKey calls POST /admin-keys.
func (c *Client) CreateKey(ctx context.Context, req apitype.CreateKeyRequest) (apitype.MintedKey, error) {
	var out apitype.MintedKey
	return out, c.Do(ctx, http.MethodPost, "/admin-keys", req, &out)
}

// DeleteKey calls DELETE /admin-keys/{id}.
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/admin-keys/"+url.PathEscape(id), nil, nil)
}

// Tokens calls GET /tokens.
func (c *Client) Tokens(ctx context.Context) ([]apitype.Token, error) {
	var out []apitype.Token
	return out, c.Do(ctx, http.MethodGet, "/tokens", nil, &out)
}

// CreateToken calls POST /tokens.
func (c *Client) CreateToken(ctx context.Context, req apitype.CreateTokenRequest) (apitype.MintedToken, error) {
	var out apitype.MintedToken
	return out, c.Do(ctx, http.MethodPost, "/tokens", req, &out)
}

// RevokeToken calls DELETE /tokens/{id} and returns the revoked token.
func (c *Client) RevokeToken(ctx context.Context, id string) (apitype.Token, error) {
	var out apitype.Token
	return out, c.Do(ctx, http.MethodDelete, "/tokens/"+url.PathEscape(id), nil, &out)
}

// Clients calls GET /clients.
func (c *Client) Clients(ctx context.Context) ([]apitype.ClientInfo, error) {
	var out []apitype.ClientInfo
	return out, c.Do(ctx, http.MethodGet, "/clients", nil, &out)
}

// Ports calls GET /ports: the public TCP and UDP ports open on the server.
func (c *Client) Ports(ctx context.Context) ([]apitype.PortInfo, error) {
	var out []apitype.PortInfo
	return out, c.Do(ctx, http.MethodGet, "/ports", nil, &out)
}

// SetClientDisabled calls POST /clients/{id}/disable (disabled) or
// /clients/{id}/enable: the kill switch of one connected client.
func (c *Client) SetClientDisabled(ctx context.Context, id string, disabled bool) error {
	verb := "/enable"
	if disabled {
		verb = "/disable"
	}
	return c.Do(ctx, http.MethodPost, "/clients/"+url.PathEscape(id)+verb, nil, nil)
}

// DrainClient calls POST /clients/{id}/drain: it asks one connected
// client to retire (finish its requests in flight, leave every server,
// exit). Asking again is harmless.
func (c *Client) DrainClient(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodPost, "/clients/"+url.PathEscape(id)+"/drain", nil, nil)
}

// Scaling calls GET /scaling.
func (c *Client) Scaling(ctx context.Context) ([]apitype.ScalingRecord, error) {
	var out []apitype.ScalingRecord
	return out, c.Do(ctx, http.MethodGet, "/scaling", nil, &out)
}

// ScalingRecord calls GET /scaling/{id}: one record, with the decisions
// (newest first) and pool samples (oldest first) the answering server
// remembers of it.
func (c *Client) ScalingRecord(ctx context.Context, id string) (apitype.ScalingRecordDetail, error) {
	var out apitype.ScalingRecordDetail
	return out, c.Do(ctx, http.MethodGet, "/scaling/"+url.PathEscape(id), nil, &out)
}

// CreateScaling calls POST /scaling: it arms autoscaling for req's bind
// before any client has connected for it, or updates and re-arms the
// organization's record of the bind, and returns the record as GET
// /scaling/{id} shows it.
func (c *Client) CreateScaling(ctx context.Context, req apitype.CreateScalingRequest) (apitype.ScalingRecordDetail, error) {
	var out apitype.ScalingRecordDetail
	return out, c.Do(ctx, http.MethodPost, "/scaling", req, &out)
}

// DisarmScaling calls DELETE /scaling/{id}, which removes the record. A
// client still declaring it arms it again on its next announcement.
func (c *Client) DisarmScaling(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/scaling/"+url.PathEscape(id), nil, nil)
}

// Webhooks calls GET /webhooks.
func (c *Client) Webhooks(ctx context.Context) ([]apitype.Webhook, error) {
	var out []apitype.Webhook
	return out, c.Do(ctx, http.MethodGet, "/webhooks", nil, &out)
}

// CreateWebhook calls POST /webhooks.
func (c *Client) CreateWebhook(ctx context.Context, req apitype.CreateWebhookRequest) (apitype.Webhook, error) {
	var out apitype.Webhook
	return out, c.Do(ctx, http.MethodPost, "/webhooks", req, &out)
}

// DeleteWebhook calls DELETE /webhooks/{id}.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/webhooks/"+url.PathEscape(id), nil, nil)
}

// WebhookDeliveries calls GET /webhooks/{id}/deliveries: the latest
// deliveries, newest first, at most limit (0 means the server's default).
func (c *Client) WebhookDeliveries(ctx context.Context, id string, limit int) ([]apitype.WebhookDelivery, error) {
	path := "/webhooks/" + url.PathEscape(id) + "/deliveries"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out []apitype.WebhookDelivery
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// TestWebhook calls POST /webhooks/{id}/test, which sends a ping to the
// webhook and answers with its outcome.
func (c *Client) TestWebhook(ctx context.Context, id string) (apitype.WebhookDelivery, error) {
	var out apitype.WebhookDelivery
	return out, c.Do(ctx, http.MethodPost, "/webhooks/"+url.PathEscape(id)+"/test", nil, &out)
}

// RedeliverWebhook calls POST
// /webhooks/{id}/deliveries/{delivery_id}/redeliver, which sends the
// logged delivery again and answers with its outcome.
func (c *Client) RedeliverWebhook(ctx context.Context, id, deliveryID string) (apitype.WebhookDelivery, error) {
	var out apitype.WebhookDelivery
	return out, c.Do(ctx, http.MethodPost, "/webhooks/"+url.PathEscape(id)+"/deliveries/"+url.PathEscape(deliveryID)+"/redeliver", nil, &out)
}

// Maintenance calls GET /maintenance.
func (c *Client) Maintenance(ctx context.Context) ([]apitype.Maintenance, error) {
	var out []apitype.Maintenance
	return out, c.Do(ctx, http.MethodGet, "/maintenance", nil, &out)
}

// SetMaintenance calls PUT /maintenance/{hostname} (exact or a "*."
// wildcard) with req: its OrgID is for the master token only ("" means the
// default), Reason and TTLSeconds are optional. The zero req sends no
// body.
func (c *Client) SetMaintenance(ctx context.Context, hostname string, req apitype.MaintenanceRequest) error {
	var in any
	if req != (apitype.MaintenanceRequest{}) {
		in = req
	}
	return c.Do(ctx, http.MethodPut, "/maintenance/"+url.PathEscape(hostname), in, nil)
}

// CreateShare calls POST /share: a link opening one hostname until it
// expires.
func (c *Client) CreateShare(ctx context.Context, req apitype.CreateShareRequest) (apitype.ShareLink, error) {
	var out apitype.ShareLink
	return out, c.Do(ctx, http.MethodPost, "/share", req, &out)
}

// RotateShareKey calls POST /share/keys/rotate: a new current share key
// for the caller's organization (req.OrgID: master token only).
func (c *Client) RotateShareKey(ctx context.Context, req apitype.RotateShareKeyRequest) (apitype.ShareKey, error) {
	var out apitype.ShareKey
	return out, c.Do(ctx, http.MethodPost, "/share/keys/rotate", req, &out)
}

// ClearMaintenance calls DELETE /maintenance/{hostname}.
func (c *Client) ClearMaintenance(ctx context.Context, hostname string) error {
	return c.Do(ctx, http.MethodDelete, "/maintenance/"+url.PathEscape(hostname), nil, nil)
}

// OrgHostnames calls GET /orgs/{id}/hostnames.
func (c *Client) OrgHostnames(ctx context.Context, orgID string) (apitype.OrgHostnames, error) {
	var out apitype.OrgHostnames
	return out, c.Do(ctx, http.MethodGet, "/orgs/"+url.PathEscape(orgID)+"/hostnames", nil, &out)
}

// SetOrgHostnames calls PUT /orgs/{id}/hostnames (the master token only),
// replacing the organization's patterns.
func (c *Client) SetOrgHostnames(ctx context.Context, orgID string, patterns []string) (apitype.OrgHostnames, error) {
	var out apitype.OrgHostnames
	in := apitype.SetOrgHostnamesRequest{Patterns: patterns}
	if in.Patterns == nil {
		in.Patterns = []string{}
	}
	return out, c.Do(ctx, http.MethodPut, "/orgs/"+url.PathEscape(orgID)+"/hostnames", in, &out)
}

// OrgPorts calls GET /orgs/{id}/ports.
func (c *Client) OrgPorts(ctx context.Context, orgID string) (apitype.OrgPorts, error) {
	var out apitype.OrgPorts
	return out, c.Do(ctx, http.MethodGet, "/orgs/"+url.PathEscape(orgID)+"/ports", nil, &out)
}

// SetOrgPorts calls PUT /orgs/{id}/ports (the master token only),
// replacing the organization's port ranges with specs ("2222",
// "20000-20099"); nil or empty means none.
func (c *Client) SetOrgPorts(ctx context.Context, orgID string, specs []string) (apitype.OrgPorts, error) {
	var out apitype.OrgPorts
	in := apitype.SetOrgPortsRequest{Ports: specs}
	if in.Ports == nil {
		in.Ports = []string{}
	}
	return out, c.Do(ctx, http.MethodPut, "/orgs/"+url.PathEscape(orgID)+"/ports", in, &out)
}

// Audit calls GET /audit. limit 0 means the server's default.
func (c *Client) Audit(ctx context.Context, limit int) ([]apitype.AuditEntry, error) {
	path := "/audit"
	if limit != 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out []apitype.AuditEntry
	return out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// Explain calls GET /explain for a request for host and path from ip ("":
// none given; then the per-visitor checks are skipped).
func (c *Client) Explain(ctx context.Context, host, path, ip string) (apitype.Explanation, error) {
	q := url.Values{"host": {host}}
	if path != "" {
		q.Set("path", path)
	}
	if ip != "" {
		q.Set("ip", ip)
	}
	var out apitype.Explanation
	return out, c.Do(ctx, http.MethodGet, "/explain?"+q.Encode(), nil, &out)
}

// ExplainPort calls GET /ports/explain: what the server would do with a
// visitor's connection from ip ("" for none) to public port num/proto.
func (c *Client) ExplainPort(ctx context.Context, num int, proto, ip string) (apitype.PortExplanation, error) {
	q := url.Values{"port": {strconv.Itoa(num)}, "protocol": {proto}}
	if ip != "" {
		q.Set("ip", ip)
	}
	var out apitype.PortExplanation
	return out, c.Do(ctx, http.MethodGet, "/ports/explain?"+q.Encode(), nil, &out)
}

// send sends one request to url with the key, asking for accept; a body
// (nil for none) is sent as JSON. The caller closes the answer's body.
func (c *Client) send(ctx context.Context, method, url, accept string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return resp, nil
}

// Do sends one request to path (relative to apitype.Prefix, with its query) with
// in as the JSON body (nil for none) and decodes the JSON answer into out
// (nil to discard it). An answer other than 2xx is a *ResponseError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	base, err := c.base()
	if err != nil {
		return err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("admin: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, base+path, "application/json", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("admin: read answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return responseError(resp.StatusCode, data)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("admin: decode answer to %s %s: %w", method, path, err)
	}
	return nil
}

// base returns the URL requests are relative to.
func (c *Client) base() (string, error) {
	if c.URL == "" {
		return "", errors.New("admin: no server URL")
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", fmt.Errorf("admin: server URL: %w", err)
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	case "http", "https":
	default:
		return "", fmt.Errorf("admin: server URL %q: scheme must be http, https, ws or wss", c.URL)
	}
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimSuffix(u.String(), "/") + apitype.Prefix, nil
}

// errorBody is the body of the API's error answers.
type errorBody struct {
	Error string `json:"error"`
}

// responseError builds the error of a failed answer from its body.
func responseError(status int, body []byte) error {
	var eb errorBody
	msg := http.StatusText(status)
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	} else if s := strings.TrimSpace(string(body)); s != "" && len(s) <= 200 {
		msg = s
	}
	return &ResponseError{StatusCode: status, Message: msg}
}

// UpdateToken calls PATCH /tokens/{id} and returns the edited token.
func (c *Client) UpdateToken(ctx context.Context, id string, req apitype.UpdateTokenRequest) (apitype.Token, error) {
	var out apitype.Token
	return out, c.Do(ctx, http.MethodPatch, "/tokens/"+url.PathEscape(id), req, &out)
}

// RotateToken calls POST /tokens/{id}/rotate and returns the token with
// its new secret.
func (c *Client) RotateToken(ctx context.Context, id string, req apitype.RotateTokenRequest) (apitype.MintedToken, error) {
	var out apitype.MintedToken
	return out, c.Do(ctx, http.MethodPost, "/tokens/"+url.PathEscape(id)+"/rotate", req, &out)
}

// UpdateOrg calls PATCH /orgs/{id} and returns the organization with its
// limits.
func (c *Client) UpdateOrg(ctx context.Context, id string, req apitype.UpdateOrgRequest) (apitype.Org, error) {
	var out apitype.Org
	return out, c.Do(ctx, http.MethodPatch, "/orgs/"+url.PathEscape(id), req, &out)
}
