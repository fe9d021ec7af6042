package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aperio-dev/aperio/internal/control/apitype"
)

// maxAPIAnswer bounds what one in-process API call may answer: the
// largest listing (1000 audit entries, every token of an organization) is
// far below it.
const maxAPIAnswer = 8 << 20

// APIError is an answer of the admin API other than 2xx: its status and
// the message of its JSON error body.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("dashboard: admin API answered %d: %s", e.Status, e.Message)
}

// call sends one request to the admin API in process, as the browser
// request r: the same context (the resolved visitor, so the API sees the
// same address and scheme), host, remote address and cookies, and for a
// state-changing call the session's CSRF token. body, when not nil, is
// sent as JSON; a 2xx answer is decoded into out when out is not nil.
// Anything else is an *APIError.
func (u *UI) call(r *http.Request, csrf, method, path string, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("dashboard: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, path, rd)
	if err != nil {
		return fmt.Errorf("dashboard: %s %s: %w", method, path, err)
	}
	req.Host = r.Host
	req.RemoteAddr = r.RemoteAddr
	req.TLS = r.TLS
	for _, k := range []string{"Cookie", "User-Agent", "X-Request-Id", "Accept-Language"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if csrf != "" {
		req.Header.Set(apitype.CSRFHeader, csrf)
	}
	rec := newRecorder(maxAPIAnswer)
	u.api.ServeHTTP(rec, req)
	if rec.overflow {
		return fmt.Errorf("dashboard: %s %s answered more than %d bytes", method, path, maxAPIAnswer)
	}
	if rec.status < 200 || rec.status > 299 {
		var eb struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(rec.buf.String())
		if json.Unmarshal(rec.buf.Bytes(), &eb) == nil && eb.Error != "" {
			msg = eb.Error
		}
		return &APIError{Status: rec.status, Message: msg}
	}
	if out == nil || rec.status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(rec.buf.Bytes(), out); err != nil {
		return fmt.Errorf("dashboard: decode %s %s: %w", method, path, err)
	}
	return nil
}

// status returns the HTTP status of err for the page that failed with it:
// an API refusal's own, 500 for anything else.
func status(err error) int {
	if ae, ok := errors.AsType[*APIError](err); ok {
		return ae.Status
	}
	if errors.Is(err, context.Canceled) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// recorder is the ResponseWriter of an in-process API call: its status,
// its headers and up to limit bytes of its body.
type recorder struct {
	h        http.Header
	status   int
	buf      bytes.Buffer
	limit    int
	overflow bool
}

func newRecorder(limit int) *recorder { return &recorder{h: http.Header{}, limit: limit} }

func (r *recorder) Header() http.Header { return r.h }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.buf.Len()+len(p) > r.limit {
		r.overflow = true
		return 0, errors.New("dashboard: answer too large")
	}
	return r.buf.Write(p)
}
