package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/portspec"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// tokenAuth authenticates tunnels: the master token (server.token), or an
// apr_ client token looked up by its hash in the store.
type tokenAuth struct {
	master     []byte
	db         *store.DB
	defaultOrg string
	now        func() time.Time
	// limits, when set, learns the byte quota of every token that
	// authenticates, before its first request.
	limits *usageLimits
}

// errInvalidToken is the one answer for every unknown token, so a caller
// learns nothing about which tokens exist.
var errInvalidToken = errors.New("invalid token")

func (a *tokenAuth) Authenticate(ctx context.Context, token string) (tunnel.Identity, error) {
	// Digests of equal length: the comparison takes the same time whatever
	// the length of either token, so it tells a caller nothing about the
	// master token's.
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256(a.master)
	if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
		return tunnel.Identity{Name: apitype.Master, OrgID: a.defaultOrg, AnyTCPPort: true}, nil
	}
	if !strings.HasPrefix(token, "apr_") {
		return tunnel.Identity{}, errInvalidToken
	}
	h := sha256.Sum256([]byte(token))
	t, err := a.db.TokenByHash(ctx, h[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tunnel.Identity{}, errInvalidToken
	case err != nil:
		return tunnel.Identity{}, fmt.Errorf("%w: %w", tunnel.ErrUnavailable, err)
	case t.RevokedAt != nil:
		return tunnel.Identity{}, errors.New("token revoked")
	case t.ExpiresAt != nil && !a.now().Before(*t.ExpiresAt):
		return tunnel.Identity{}, errors.New("token expired")
	}
	a.limits.setToken(t)
	previous := !bytes.Equal(t.Hash, h[:])
	if previous && (t.PrevExpiresAt == nil || !a.now().Before(*t.PrevExpiresAt)) {
		return tunnel.Identity{}, errors.New("token secret rotated: connect with the new secret")
	}
	return identityOf(t, previous)
}

// identityOf is what token t grants a session that authenticated with its
// current secret, or with its previous one (previous), whose sessions end
// with the rotation's grace and are told so with every heartbeat.
func identityOf(t store.Token, previous bool) (tunnel.Identity, error) {
	id := tunnel.Identity{TokenID: t.ID, OrgID: t.OrgID, Name: t.Name, Hostnames: t.Hostnames, AllowCatchAll: t.AllowCatchAll,
		Paths: t.Limits.Paths, MaxRPS: t.Limits.MaxRPS, MaxConnections: t.Limits.MaxConnections, Generation: t.Generation}
	if t.ExpiresAt != nil {
		id.ExpiresAt = *t.ExpiresAt
	}
	if previous {
		id.Generation = t.Generation - 1
		if t.PrevExpiresAt != nil && (id.ExpiresAt.IsZero() || t.PrevExpiresAt.Before(id.ExpiresAt)) {
			id.ExpiresAt = *t.PrevExpiresAt
			id.EndReason = "token secret rotated: the previous secret's grace ended; connect with the new secret"
		}
		if t.PrevExpiresAt != nil {
			id.Notice = fmt.Sprintf("token %s was rotated: this client's secret stops working at %s; switch to the new secret", t.ID, t.PrevExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	var err error
	if id.AllowedIPs, err = parsePrefixes(t.ID, "allowed_ips", t.AllowedIPs); err != nil {
		return tunnel.Identity{}, err
	}
	if id.ClientAllowedIPs, err = parsePrefixes(t.ID, "client_allowed_ips", t.Limits.ClientAllowedIPs); err != nil {
		return tunnel.Identity{}, err
	}
	if id.AllowTCPPorts, err = portspec.ParseList(t.Limits.AllowTCPPorts); err != nil {
		return tunnel.Identity{}, fmt.Errorf("token %s has an invalid allow_tcp_ports: %w", t.ID, err)
	}
	return id, nil
}

// parsePrefixes parses a token's stored CIDRs. The API validates them
// before storing them; a bad one here means the record was edited by
// hand, and refusing the token is the safe reading.
func parsePrefixes(tokenID, field string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("token %s has an invalid %s entry %q", tokenID, field, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// auditHook emits client_refused, within a per-token budget (see
// events.RefusalBudget), client_connected and client_disconnected, and audits
// refused binds: the "audit" session hook.
type auditHook struct {
	events *events.Emitter
	log    *slog.Logger
	budget *events.RefusalBudget
	binds  *bindAudits // nil: refused binds are not audited
	// retired reports idle retirements (instance_retired); nil: not
	// reported.
	retired *retirements
}

// hook returns the auditing's part in a session's life.
func (r auditHook) hook() sessionHook {
	return sessionHook{
		name: "audit",
		refused: func(ctx context.Context, s *tunnel.Session, err error) {
			r.refused(ctx, s.Identity(), s.Announcement().Name, s.RemoteAddr(), err)
		},
		attached: func(_ context.Context, s *tunnel.Session) {
			r.events.Offer(sessionEvent(apitype.EventClientConnected, s))
		},
		updated: r.update,
		left:    r.leave,
	}
}

// sessionEvent is the client_connected or client_disconnected event of
// s. Offered, not emitted: the handshake and the session's end never wait
// for the audit write.
func sessionEvent(kind string, s *tunnel.Session) events.Event {
	id, ann := s.Identity(), s.Announcement()
	hosts := []string{}
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			if !slices.Contains(hosts, h) && len(hosts) < maxBindsNamed {
				hosts = append(hosts, h)
			}
		}
	}
	ev := events.Event{
		Kind: kind, OrgID: id.OrgID, Actor: store.ClientActor(id.TokenID),
		Detail: fmt.Sprintf("client %s %q from %s, hostnames %s", s.ID(), ann.Name, s.RemoteAddr(), strings.Join(hosts, ", ")),
		Fields: map[string]any{"client_id": s.ID(), "name": ann.Name, "token_id": id.TokenID, "remote_addr": s.RemoteAddr(), "hostnames": hosts},
	}
	if len(hosts) == 1 {
		ev.Hostname = hosts[0]
	}
	return ev
}

// refused emits the refusal of a client called name, from remote, when
// the budget of its token admits it. It blocks for the audit write, at
// most the emitter's audit timeout.
func (r auditHook) refused(ctx context.Context, id tunnel.Identity, name, remote string, why error) {
	actor := store.ClientActor(id.TokenID)
	ok, leftOut, first := r.budget.Admit(actor.String())
	if first {
		r.log.Warn("refused clients over budget, not auditing the rest of this minute",
			logkey.Actor, actor, logkey.Limit, events.MaxRefusalAudits, logkey.RemoteAddr, remote)
	}
	if !ok {
		return
	}
	detail := fmt.Sprintf("%s from %s: %v", name, remote, why)
	if leftOut > 0 {
		detail += fmt.Sprintf(" (%d earlier refusals of this token over budget, not audited)", leftOut)
	}
	r.events.Emit(ctx, events.Event{Kind: apitype.EventClientRefused, OrgID: id.OrgID, Actor: actor, Detail: detail,
		Fields: map[string]any{"name": name, "token_id": id.TokenID, "remote_addr": remote, "reason": why.Error(), "suppressed": leftOut}})
}
