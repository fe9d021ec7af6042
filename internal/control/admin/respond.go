package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
)

// handlerFunc serves one route for an authenticated caller. It writes the
// response on success and returns an error otherwise, which serve
// translates (see fail).
type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller) error

// httpError is an error with the status and message the client sees.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// errorBody is the body of every error response.
type errorBody struct {
	Error string `json:"error"`
}

// fail answers err. It is the one place errors become responses: an
// *httpError as it says, a store error by its sentinel, anything else 500.
// Store outages and internal errors are logged with the details the client
// does not get.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "internal error"
	var he *httpError
	switch {
	case errors.As(err, &he):
		status, msg = he.status, he.msg
	case errors.Is(err, store.ErrUnavailable):
		status, msg = http.StatusServiceUnavailable, "the store is unavailable, try again later"
		a.log.Error("store unavailable", logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Err, err)
	case errors.Is(err, store.ErrNotFound):
		status, msg = http.StatusNotFound, "not found"
	case errors.Is(err, store.ErrConflict):
		status, msg = http.StatusConflict, "conflict with an existing record"
	default:
		a.log.Error("admin request failed", logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Err, err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="aperio"`)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	a.writeJSON(w, r, status, errorBody{Error: msg})
}

// writeJSON answers v as JSON with status.
func (a *API) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		a.log.Error("encode admin response", logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Err, err)
		status, body = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // responses may carry secrets
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// A failed write means the client went away; there is no one to tell.
	w.Write(append(body, '\n'))
}

// decode reads r's JSON body, at most MaxBodyBytes, into dst, a pointer to
// a struct. The body must be one JSON object whose names are exactly json
// tags of dst (case-sensitive), none twice in any object; anything else is
// a 400 naming the problem.
// An empty body is an error unless optional is set, in which case dst is
// left as it is.
func decode(w http.ResponseWriter, r *http.Request, dst any, optional bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "cannot read the request body: %v", err)
	}
	return decodeBody(body, dst, optional)
}

// decodeBody is decode for a body already read.
func decodeBody(body []byte, dst any, optional bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return errorf(http.StatusBadRequest, "request body is empty: expected a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return jsonError(err)
	}
	if fields == nil {
		return errorf(http.StatusBadRequest, "expected a JSON object, got null")
	}
	if name, dup := duplicateKey(body); dup {
		return errorf(http.StatusBadRequest, "duplicate field %q: each name may appear once in an object", name)
	}
	known := jsonFields(reflect.TypeOf(dst).Elem())
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(known, name) {
			return errorf(http.StatusBadRequest, "unknown field %q (known fields: %s)", name, strings.Join(known, ", "))
		}
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return jsonError(err)
	}
	return nil
}

// jsonError turns an encoding/json error into a 400 saying what is wrong.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te) && te.Field == "":
		return errorf(http.StatusBadRequest, "expected a JSON object, got %s", te.Value)
	case errors.As(err, &te):
		return errorf(http.StatusBadRequest, "field %q: expected %s, got %s", te.Field, jsonTypeName(te.Type), te.Value)
	}
	return errorf(http.StatusBadRequest, "malformed JSON: %v", err)
}

// jsonFields returns the JSON names of the fields of struct type t, in
// order.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// jsonTypeName names t as a JSON type, for messages.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonTypeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return "an object"
}

// The audit events the API writes.
const (
	EventOrgCreated      = "org_created"
	EventAdminKeyCreated = "admin_key_created"
	EventAdminKeyDeleted = "admin_key_deleted"
	EventTokenCreated    = apitype.EventTokenCreated
	EventTokenRevoked    = apitype.EventTokenRevoked
	EventMaintenanceOn   = apitype.EventMaintenanceOn
	EventMaintenanceOff  = apitype.EventMaintenanceOff
	EventLoginFailed     = "login_failed"
	EventWebhookCreated  = "webhook_created"
	EventWebhookDeleted  = "webhook_deleted"
	// EventWebhookTested is POST /webhooks/{id}/test: a ping sent.
	EventWebhookTested = "webhook_tested"
	// EventWebhookRedelivered is POST
	// /webhooks/{id}/deliveries/{delivery_id}/redeliver.
	EventWebhookRedelivered = "webhook_redelivered"
	EventShareCreated       = "share_created"
	EventShareKeyRotated    = "share_key_rotated"
	// EventScalingDisarmedByOperator is DELETE /scaling/{id}: a person
	// removed the record. It is named apart from the autoscaler's own
	// autoscale.EventDisarmed (the breaker tripped, the record stays), so
	// that the audit log tells the two apart while both still start with
	// "scaling_disarmed".
	EventScalingDisarmedByOperator = "scaling_disarmed_by_operator"
)

// auditTimeout bounds one audit append. The append outlives the request's
// cancellation: a mutation that happened is recorded even when its caller
// has gone.
const auditTimeout = 5 * time.Second

// emit is events.Emitter.Emit for the events webhooks may receive: it
// appends ev's audit entry, stamped now, then hands ev to webhook
// delivery. Like audit, it reports no failure to the caller.
func (a *API) emit(r *http.Request, ev events.Event) {
	if ev.At.IsZero() {
		ev.At = a.now()
	}
	a.emitter.Emit(r.Context(), ev)
}

// audit appends e to the audit log, stamped now. A failure is logged, not
// returned: the change it records has already been made and answering an
// error would tell the caller it had not.
func (a *API) audit(r *http.Request, e store.AuditEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	e.At = a.now()
	if _, err := a.store.AppendAudit(ctx, e); err != nil {
		a.log.Error("audit entry lost", logkey.Event, e.Event, logkey.Actor, e.Actor, logkey.OrgID, e.OrgID, logkey.Err, err)
	}
}

// tokenFields are the webhook fields of the token events: the token's ID,
// name, hostnames and expiry (RFC 3339, "" for none), never its secret.
func tokenFields(t store.Token) map[string]any {
	exp := ""
	if t.ExpiresAt != nil {
		exp = t.ExpiresAt.UTC().Format(time.RFC3339)
	}
	hosts := t.Hostnames
	if hosts == nil {
		hosts = []string{}
	}
	return map[string]any{"token_id": t.ID, "name": t.Name, "hostnames": hosts, "expires_at": exp}
}
