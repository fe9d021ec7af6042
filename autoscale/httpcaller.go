package autoscale

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aperio-dev/aperio/internal/buildinfo"
	"github.com/aperio-dev/aperio/internal/outbound"
)

// HTTPCaller performs hook calls through the outbound fence (contract §4):
// POST with the JSON body, Content-Type application/json, Authorization:
// Bearer <secret> when one is set, Idempotency-Key and User-Agent
// aperio/<version>. Any 2xx is success; the body is never read and
// redirects are never followed (the fence sees to both). Create it with
// NewHTTPCaller; it is safe for concurrent use.
type HTTPCaller struct {
	client *outbound.Client
	now    func() time.Time
}

// NewHTTPCaller returns a Caller over client.
func NewHTTPCaller(client *outbound.Client) *HTTPCaller {
	return &HTTPCaller{client: client, now: time.Now}
}

// Call implements Caller. A refusal by the fence, a timeout or a transport
// failure is status 0 and an error; a non-2xx answer is its status, a
// *CallError, and the Retry-After it carried.
func (h *HTTPCaller) Call(ctx context.Context, c HookCall) (int, time.Duration, error) {
	body, err := MarshalBody(c.Body)
	if err != nil {
		return 0, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("autoscale: hook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "aperio/"+buildinfo.Version())
	req.Header.Set("Idempotency-Key", c.IdempotencyKey)
	if g := c.Body.LeaseGeneration; g > 0 {
		req.Header.Set(LeaseGenerationHeader, strconv.FormatInt(g, 10))
	}
	if c.Secret != "" {
		req.Header.Set("Authorization", "Bearer "+c.Secret)
	}
	resp, err := h.client.Do(ctx, req)
	if err != nil {
		return 0, 0, err
	}
	retry, _ := ParseRetryAfter(resp.Header.Get("Retry-After"), h.now())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, retry, &CallError{Status: resp.StatusCode, Err: fmt.Errorf("provider answered %s", resp.Status)}
	}
	return resp.StatusCode, retry, nil
}
