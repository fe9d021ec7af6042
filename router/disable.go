package router

import (
	"errors"
	"slices"
)

// ErrNoClient is SetDisabled's answer when no connected client has the id.
var ErrNoClient = errors.New("router: no such client")

// SetDisabled disables or enables the connected client whose ID is id
// (the kill switch). A disabled client's services take no new requests,
// as if draining: the requests in flight finish, its tunnel stays up and
// its announcements are applied as usual, and the pools it serves route
// to their other members (or wait, then 502/504, when it was the only
// one). Enabling it routes to it again at once. The state lasts for the
// session: a reconnecting client is a new client, enabled. It returns
// ErrNoClient when no client has that id, and is safe for concurrent use.
func (rg *Registry) SetDisabled(id string, disabled bool) error {
	rg.mu.Lock()
	var e *clientEntry
	for c, ce := range rg.clients {
		if c.ID() == id {
			e = ce
			break
		}
	}
	if e == nil {
		rg.mu.Unlock()
		return ErrNoClient
	}
	e.disabled = disabled
	for _, s := range e.services {
		s.disabled.Store(disabled)
	}
	touched := make([]*pool, 0, len(e.keys))
	for k := range e.keys {
		if p := rg.pools[k]; p != nil {
			touched = append(touched, p)
		}
	}
	rg.mu.Unlock()
	// Requests queued for a permit may now be served by it (enabled) or
	// must look elsewhere (disabled).
	for _, p := range touched {
		p.wake(rg.strategy)
	}
	return nil
}

// BindState is what the router holds of one client's binds, for GET
// /clients.
type BindState struct {
	// Refused lists the binds of its announcement its rights refuse:
	// hostname and path, or "(catch-all)" and path for a service with no
	// hostname that may have none. Nil when none.
	Refused []string
	// Disabled is set while an operator disabled the client.
	Disabled bool
}

// Binds returns conn's bind state; the zero value when conn is not
// attached. It is safe for concurrent use.
func (rg *Registry) Binds(conn Conn) BindState {
	rg.mu.Lock()
	defer rg.mu.Unlock()
	e := rg.clients[conn]
	if e == nil {
		return BindState{}
	}
	return BindState{Refused: slices.Clone(e.refused), Disabled: e.disabled}
}
