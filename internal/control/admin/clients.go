package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/aperio-dev/aperio/store"
)

// ClientDisabler is the kill switch of connected clients, for POST
// /clients/{id}/disable and /enable: *server.Gateway, over the router's.
// SetClientDisabled must be safe for concurrent use and wrap
// ErrNoClient when no connected client has the id.
type ClientDisabler interface {
	SetClientDisabled(id string, disabled bool) error
}

// ClientDrainer asks connected clients to retire, for POST
// /clients/{id}/drain: *server.Gateway, over the tunnel sessions.
// DrainClient must be safe for concurrent use, must not block, must be
// idempotent and must wrap ErrNoClient when no connected client has the
// id.
type ClientDrainer interface {
	DrainClient(id string) error
}

// ErrNoClient is wrapped by a ClientDisabler's or ClientDrainer's error when no connected
// client has the id (it left since the lookup); the API answers 404.
var ErrNoClient = errors.New("admin: no such client")

// Events of the kill switch.
const (
	EventClientDisabled = "client_disabled"
	EventClientEnabled  = "client_enabled"
	// EventClientDrain is an operator's ask that a client retire.
	EventClientDrain = "client_drain"
)

// maxClientIDBytes bounds a client id in a path; session ids are far
// shorter.
const maxClientIDBytes = 256

func (a *API) disableClient(w http.ResponseWriter, r *http.Request, c caller) error {
	return a.setClientDisabled(w, r, c, true)
}

func (a *API) enableClient(w http.ResponseWriter, r *http.Request, c caller) error {
	return a.setClientDisabled(w, r, c, false)
}

// setClientDisabled disables or enables the client named in the path,
// when c may see it: another organization's client answers 404 exactly
// like an unknown one.
func (a *API) setClientDisabled(w http.ResponseWriter, r *http.Request, c caller, disabled bool) error {
	id, found, err := a.visibleClient(r, c)
	if err != nil {
		return err
	}
	notFound := errorf(http.StatusNotFound, "client %q not found", id)
	if a.disabler == nil {
		return notFound
	}
	if err := a.disabler.SetClientDisabled(id, disabled); errors.Is(err, ErrNoClient) {
		return notFound // it left since the lookup
	} else if err != nil {
		return err
	}
	event, verb := EventClientEnabled, "enabled"
	if disabled {
		event, verb = EventClientDisabled, "disabled"
	}
	a.audit(r, store.AuditEntry{
		Event:  event,
		Actor:  c.actor(),
		OrgID:  found.OrgID,
		Detail: fmt.Sprintf("client %s name=%q from %s %s", id, found.Name, found.RemoteAddr, verb),
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// visibleClient returns the id in the path and the client it names, when
// c may see it: another organization's client answers 404 exactly like an
// unknown one, an id above maxClientIDBytes 400.
func (a *API) visibleClient(r *http.Request, c caller) (string, *ClientInfo, error) {
	id := pathParam(r, "id")
	if len(id) > maxClientIDBytes {
		return id, nil, errorf(http.StatusBadRequest, "client id is %d bytes, at most %d", len(id), maxClientIDBytes)
	}
	for _, ci := range a.clients.Clients() {
		if ci.ID == id && c.sees(ci.OrgID) {
			return id, &ci, nil
		}
	}
	return id, nil, errorf(http.StatusNotFound, "client %q not found", id)
}

// drainClient asks the client named in the path to retire: the server
// says drain on every ack of its session from now on, and a client that
// understands it announces draining to every server, finishes its
// requests in flight and exits. Asking again changes nothing but the
// audit log.
func (a *API) drainClient(w http.ResponseWriter, r *http.Request, c caller) error {
	id, found, err := a.visibleClient(r, c)
	if err != nil {
		return err
	}
	notFound := errorf(http.StatusNotFound, "client %q not found", id)
	if a.drainer == nil {
		return notFound
	}
	if err := a.drainer.DrainClient(id); errors.Is(err, ErrNoClient) {
		return notFound // it left since the lookup
	} else if err != nil {
		return err
	}
	a.audit(r, store.AuditEntry{
		Event:  EventClientDrain,
		Actor:  c.actor(),
		OrgID:  found.OrgID,
		Detail: fmt.Sprintf("client %s name=%q from %s asked to drain", id, found.Name, found.RemoteAddr),
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}
