package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/router"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// EventClientBindRefused is the audit event of a connected client's
// refused binds: one entry each time the set of binds the server refuses
// it changes to a non-empty one, within a per-token budget like
// client_refused's.
const EventClientBindRefused = "client_bind_refused"

// maxBindsNamed bounds the refused binds an entry names, so that an
// announcement of a thousand refused hostnames writes a short entry.
const maxBindsNamed = 10

// bindAudits remembers, per session, the refused binds last seen, so that
// a heartbeat repeating them writes nothing. It is safe for concurrent
// use.
type bindAudits struct {
	reg    *router.Registry
	budget *events.RefusalBudget

	mu   sync.Mutex // guards last
	last map[*tunnel.Session]string
}

func newBindAudits(reg *router.Registry, now func() time.Time) *bindAudits {
	return &bindAudits{reg: reg, budget: events.NewRefusalBudget(now), last: make(map[*tunnel.Session]string)}
}

// changed returns s's refused binds and whether they differ from the last
// seen, and records them.
func (b *bindAudits) changed(s *tunnel.Session) ([]string, bool) {
	refused := b.reg.Binds(s).Refused
	key := strings.Join(refused, "\n")
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, seen := b.last[s]
	if seen && prev == key {
		return refused, false
	}
	b.last[s] = key
	return refused, len(refused) > 0
}

func (b *bindAudits) forget(s *tunnel.Session) {
	b.mu.Lock()
	delete(b.last, s)
	b.mu.Unlock()
}

// update audits the session's refused binds, once the router applied its
// announcement, when they changed (see EventClientBindRefused). The entry
// is offered to the events queue, not written: it runs before the
// handshake's welcome or the heartbeat's ack, which never wait for the
// store. It has no notice for the client.
func (r auditHook) update(ctx context.Context, s *tunnel.Session) []string {
	if r.retired != nil {
		if ev, ok := r.retired.check(s); ok {
			r.events.Offer(ev)
			r.retired.publish(s, ev)
		}
	}
	if r.binds == nil {
		return nil
	}
	refused, changed := r.binds.changed(s)
	if !changed {
		return nil
	}
	id := s.Identity()
	actor := store.ClientActor(id.TokenID)
	ok, leftOut, first := r.binds.budget.Admit(actor.String())
	if first {
		r.log.Warn("refused binds over budget, not auditing the rest of this minute",
			logkey.Actor, actor, logkey.Limit, events.MaxRefusalAudits, logkey.RemoteAddr, s.RemoteAddr())
	}
	if !ok {
		return nil
	}
	named := refused
	more := ""
	if len(named) > maxBindsNamed {
		named, more = named[:maxBindsNamed], fmt.Sprintf(" and %d more", len(refused)-maxBindsNamed)
	}
	detail := fmt.Sprintf("client %s %q from %s: refused binds %s%s", s.ID(), s.Announcement().Name, s.RemoteAddr(), strings.Join(named, ", "), more)
	if leftOut > 0 {
		detail += fmt.Sprintf(" (%d earlier changes of this token over budget, not audited)", leftOut)
	}
	r.events.Offer(events.Event{Kind: EventClientBindRefused, OrgID: id.OrgID, Actor: actor, Detail: detail})
	return nil
}

// leave forgets the session's refused binds and emits
// client_disconnected, once the router forgot the session.
func (r auditHook) leave(_ context.Context, s *tunnel.Session) {
	if r.binds != nil {
		r.binds.forget(s)
	}
	if r.retired != nil {
		r.retired.forget(s)
	}
	r.events.Offer(sessionEvent(apitype.EventClientDisconnected, s))
}
