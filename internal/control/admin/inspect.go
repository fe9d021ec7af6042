package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/visitor/inspect"
	"github.com/aperio-dev/aperio/store"
)

// The audit events of the request inspector.
const (
	EventInspectStart  = "inspect_start"
	EventInspectStop   = "inspect_stop"
	EventInspectReplay = "inspect_replay"
)

// replayTimeout bounds a replay through the pipeline, its answer's body
// included: a streaming answer is cut there (the capture keeps what
// passed).
const replayTimeout = 30 * time.Second

// maxEntryID bounds the id in a path of the inspector's routes.
const maxEntryID = 64

type (
	// InspectRequest is the optional body of PUT /inspect/{hostname}.
	InspectRequest = apitype.InspectRequest
	// InspectCapture is a capture of a hostname's requests.
	InspectCapture = apitype.InspectCapture
	// InspectSummary is a captured request as listings show it.
	InspectSummary = apitype.InspectSummary
	// InspectEntry is a captured request in full.
	InspectEntry = apitype.InspectEntry
	// InspectReplay is the answer to a replay.
	InspectReplay = apitype.InspectReplay
)

// inspector returns the server's inspector, or the 404 of a server
// without one.
func (a *API) inspector() (*inspect.Inspector, error) {
	if a.inspect == nil {
		return nil, errorf(http.StatusNotFound, "the request inspector is off on this server")
	}
	return a.inspect, nil
}

// inspectHost is the hostname of an inspector route, which c's
// organization must be allowed to name (ownership.check), and the
// organization it acts in.
func (a *API) inspectHost(r *http.Request, c caller) (string, string, error) {
	host, err := hostParam(r)
	if err != nil {
		return "", "", err
	}
	if c.master {
		// The master token acts on any hostname, in its owner's name.
		own, err := a.ownership(r.Context())
		if err != nil {
			return "", "", err
		}
		if who, _, ok := own.owners.Owner(host); ok {
			return host, who, nil
		}
		return host, own.defaultOrg, nil
	}
	orgID, _, err := a.ownedHost(r.Context(), c, "", host)
	if err != nil {
		return "", "", err
	}
	return host, orgID, nil
}

// capture returns host's capture, when c may see it: 404 otherwise, as
// for a hostname that has none.
func (a *API) capture(r *http.Request, c caller) (*inspect.Capture, string, error) {
	in, err := a.inspector()
	if err != nil {
		return nil, "", err
	}
	host, _, err := a.inspectHost(r, c)
	if err != nil {
		return nil, "", err
	}
	cp := in.Capture(host)
	if cp == nil || !c.master && !c.sees(cp.OrgID()) && !a.ownsNow(r.Context(), c, host) {
		return nil, "", errorf(http.StatusNotFound, "%s has no capture", host)
	}
	return cp, host, nil
}

// ownsNow reports whether c's organization owns host now.
func (a *API) ownsNow(ctx context.Context, c caller, host string) bool {
	own, err := a.ownership(ctx)
	return err == nil && own.owns(c.scope(), host)
}

func (a *API) startInspect(w http.ResponseWriter, r *http.Request, c caller) error {
	in, err := a.inspector()
	if err != nil {
		return err
	}
	host, orgID, err := a.inspectHost(r, c)
	if err != nil {
		return err
	}
	var req InspectRequest
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	st, err := in.Start(host, inspect.Options{InspectRequest: req, OrgID: orgID, StartedBy: c.actor().String()})
	switch {
	case errors.Is(err, inspect.ErrBadInput):
		return errorf(http.StatusBadRequest, "%v", err)
	case errors.Is(err, inspect.ErrTooMany):
		return errorf(http.StatusConflict, "%v", err)
	case errors.Is(err, inspect.ErrNoMemory):
		return errorf(http.StatusInsufficientStorage, "%v", err)
	case err != nil:
		return err
	}
	a.audit(r, store.AuditEntry{
		Event: EventInspectStart, Actor: c.actor(), OrgID: orgID, Hostname: host,
		Detail: fmt.Sprintf("ends_at=%s max_requests=%d body_bytes=%d stop_when_full=%t", st.EndsAt.UTC().Format(time.RFC3339), st.MaxRequests, st.BodyBytes, st.StopWhenFull),
	})
	a.writeJSON(w, r, http.StatusOK, st)
	return nil
}

func (a *API) listInspect(w http.ResponseWriter, r *http.Request, c caller) error {
	in, err := a.inspector()
	if err != nil {
		return err
	}
	cs := in.Captures()
	if !c.master {
		own, err := a.ownership(r.Context())
		if err != nil {
			return err
		}
		cs = slices.DeleteFunc(cs, func(cp InspectCapture) bool {
			return !c.sees(cp.OrgID) && !own.owns(c.scope(), cp.Hostname)
		})
	}
	a.writeJSON(w, r, http.StatusOK, cs)
	return nil
}

func (a *API) stopInspect(w http.ResponseWriter, r *http.Request, c caller) error {
	cp, host, err := a.capture(r, c)
	if err != nil {
		return err
	}
	st, ok := a.inspect.Stop(host)
	if !ok {
		return errorf(http.StatusNotFound, "%s has no capture", host)
	}
	a.audit(r, store.AuditEntry{
		Event: EventInspectStop, Actor: c.actor(), OrgID: cp.OrgID(), Hostname: host,
		Detail: "captured=" + strconv.FormatInt(st.Captured, 10),
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) listInspectRequests(w http.ResponseWriter, r *http.Request, c caller) error {
	cp, _, err := a.capture(r, c)
	if err != nil {
		return err
	}
	a.writeJSON(w, r, http.StatusOK, cp.Requests())
	return nil
}

// entryParam is the {id} of an inspector route, bounded.
func entryParam(r *http.Request) (string, error) {
	id := pathParam(r, "id")
	if id == "" || len(id) > maxEntryID {
		return "", errorf(http.StatusBadRequest, "request id: 1 to %d bytes", maxEntryID)
	}
	return id, nil
}

func (a *API) getInspectRequest(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := entryParam(r)
	if err != nil {
		return err
	}
	cp, host, err := a.capture(r, c)
	if err != nil {
		return err
	}
	e, err := cp.Entry(id)
	if err != nil {
		return errorf(http.StatusNotFound, "%s has no captured request %s", host, id)
	}
	a.writeJSON(w, r, http.StatusOK, e)
	return nil
}

// replayInspectRequest re-sends a captured request through the server's
// whole pipeline (Config.Replay), as the caller's visitor: it takes a
// token of the caller's visitor bucket like any request.
func (a *API) replayInspectRequest(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := entryParam(r)
	if err != nil {
		return err
	}
	cp, host, err := a.capture(r, c)
	if err != nil {
		return err
	}
	if a.replay == nil {
		return errorf(http.StatusNotFound, "replay is off on this server")
	}
	ctx, cancel := context.WithTimeout(r.Context(), replayTimeout)
	defer cancel()
	req, mark, err := cp.ReplayRequest(ctx, id)
	switch {
	case errors.Is(err, inspect.ErrNoEntry):
		return errorf(http.StatusNotFound, "%s has no captured request %s", host, id)
	case errors.Is(err, inspect.ErrInactive):
		return errorf(http.StatusConflict, "%s has no active capture: start one to replay", host)
	case errors.Is(err, inspect.ErrNoReplay):
		return errorf(http.StatusConflict, "%v", err)
	case err != nil:
		return err
	}
	req.RemoteAddr = r.RemoteAddr
	if rid := r.Header["X-Request-Id"]; len(rid) > 0 {
		req.Header["X-Request-Id"] = rid
	}
	rw := &replayWriter{header: http.Header{}}
	a.replay.ServeHTTP(rw, req)
	newID := mark.ID()
	a.audit(r, store.AuditEntry{
		Event: EventInspectReplay, Actor: c.actor(), OrgID: cp.OrgID(), Hostname: host,
		Detail: fmt.Sprintf("of=%s id=%s status=%d", id, newID, rw.statusOr200()),
	})
	if newID == "" {
		return errorf(http.StatusConflict, "the replay was answered %d, but the capture of %s ended before recording it", rw.statusOr200(), host)
	}
	a.writeJSON(w, r, http.StatusOK, InspectReplay{ID: newID, Status: rw.statusOr200()})
	return nil
}

// replayWriter is the visitor's side of a replay: it keeps the status
// and drops the body, which the capture records.
type replayWriter struct {
	header http.Header
	status int
}

func (w *replayWriter) Header() http.Header { return w.header }

func (w *replayWriter) WriteHeader(status int) {
	if w.status == 0 && status >= 200 {
		w.status = status
	}
}

func (w *replayWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

// Flush implements http.Flusher: there is nothing to flush.
func (w *replayWriter) Flush() {}

func (w *replayWriter) statusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
