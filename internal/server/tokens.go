package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// tokenSessions keeps the tunnels of this server true to their tokens as
// the store holds them: a revoked or expired token's sessions go away, an
// edited or rotated one's take its new identity, and a token about to
// expire is warned about (once per threshold across the servers sharing
// the store). The change feed (watchChanges) and the expiry loop drive it.
type tokenSessions struct {
	db      *store.DB
	tunnels *tunnel.Server
	events  *events.Emitter
	log     *slog.Logger
}

// tokenRefreshTimeout bounds the read of an edited token.
const tokenRefreshTimeout = 5 * time.Second

// refresh applies the stored state of token id to its sessions on
// this server: an edit (hostnames, paths, limits, expiry) replaces their
// identity, which the router applies at their next heartbeat; a rotation
// puts the sessions on the previous secret into its grace (a notice with
// every ack, closed when it ends) and ends those on older secrets; a
// session whose address the new client_allowed_ips refuses is closed. A
// tightened max_connections closes nothing: it refuses new handshakes.
func (ts *tokenSessions) refresh(ctx context.Context, tokenID string) {
	var sessions []*tunnel.Session
	for _, s := range ts.tunnels.Sessions() {
		if s.Identity().TokenID == tokenID {
			sessions = append(sessions, s)
		}
	}
	if len(sessions) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, tokenRefreshTimeout)
	defer cancel()
	t, err := ts.db.Token(ctx, "", tokenID)
	if err != nil {
		ts.log.Error("edited token unreadable: its sessions keep their rights until the next change", logkey.TokenID, tokenID, logkey.Err, err)
		return
	}
	for _, s := range sessions {
		ts.apply(s, t)
	}
}

// apply applies t to one of its sessions.
func (ts *tokenSessions) apply(s *tunnel.Session, t store.Token) {
	old := s.Identity()
	if t.RevokedAt != nil {
		ts.goAway(s, t.ID, "token revoked")
		return
	}
	previous := old.Generation < t.Generation
	if old.Generation < t.Generation-1 {
		ts.goAway(s, t.ID, "token secret rotated twice: connect with the new secret")
		return
	}
	id, err := identityOf(t, previous)
	if err != nil {
		ts.goAway(s, t.ID, err.Error())
		return
	}
	if err := clientIPRefusal(id, s.RemoteAddr()); err != nil {
		ts.goAway(s, t.ID, err.Error())
		return
	}
	s.SetIdentity(id)
	if previous && old.Notice == "" {
		ts.log.Info("session on a rotated secret: in its grace", logkey.SessionID, s.ID(), logkey.TokenID, t.ID)
	}
}

func (ts *tokenSessions) goAway(s *tunnel.Session, tokenID, reason string) {
	ts.log.Info("disconnecting client", logkey.SessionID, s.ID(), logkey.TokenID, tokenID, logkey.Reason, reason)
	s.GoAway(reason)
}

// Expiry warnings: token_expiring at 7 days and at 1 day before a token
// expires, once per token and threshold across every server sharing the
// store (the store's claim decides), checked every expiryCheckEvery.
const expiryCheckEvery = time.Minute

// expiryThresholds are the warnings, largest first.
var expiryThresholds = [...]struct {
	before time.Duration
	bit    int
	name   string
}{
	{7 * 24 * time.Hour, store.ExpiryWarn7d, "7d"},
	{24 * time.Hour, store.ExpiryWarn1d, "1d"},
}

// warnLoop sends the expiry warnings due every expiryCheckEvery
// until ctx ends.
func (ts *tokenSessions) warnLoop(ctx context.Context) {
	t := time.NewTicker(expiryCheckEvery)
	defer t.Stop()
	for {
		ts.warnExpiring(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// warnExpiring audits token_expiring for each token that expires within a
// threshold and has not been warned at it, claiming the warning first so
// that one server sends it. A threshold already passed when the expiry
// was set (a token minted for 2 days) still gets its warning, once.
func (ts *tokenSessions) warnExpiring(ctx context.Context, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, tokenRecheckTimeout)
	defer cancel()
	due, err := ts.db.TokensExpiringBy(ctx, now, now.Add(expiryThresholds[0].before))
	if err != nil {
		ts.log.Error("expiring tokens unreadable", logkey.Err, err)
		return
	}
	for _, t := range due {
		for _, th := range expiryThresholds {
			if t.ExpiryWarned&th.bit != 0 || t.ExpiresAt.Sub(now) > th.before {
				continue
			}
			ok, err := ts.db.ClaimExpiryWarning(ctx, t.ID, *t.ExpiresAt, th.bit)
			if err != nil {
				ts.log.Error("expiry warning not claimed", logkey.TokenID, t.ID, logkey.Err, err)
				continue
			}
			if !ok {
				continue // another server sent it
			}
			exp := t.ExpiresAt.UTC().Format(time.RFC3339)
			ts.events.Emit(ctx, events.Event{Kind: EventTokenExpiring, OrgID: t.OrgID, Actor: store.ServerActor,
				Detail: fmt.Sprintf("token %s name=%q expires at %s (warning %s)", t.ID, t.Name, exp, th.name),
				Fields: map[string]any{"token_id": t.ID, "name": t.Name, "expires_at": exp, "warning": th.name}})
		}
	}
}

// EventTokenExpiring is the audit event of an expiry warning.
const EventTokenExpiring = apitype.EventTokenExpiring

// disconnect ends every session of the token.
func (ts *tokenSessions) disconnect(tokenID, reason string) {
	for _, s := range ts.tunnels.Sessions() {
		if s.Identity().TokenID == tokenID {
			ts.log.Info("disconnecting client", logkey.SessionID, s.ID(), logkey.TokenID, tokenID, logkey.Reason, reason)
			s.GoAway(reason)
		}
	}
}

// tokenRecheckTimeout bounds one re-check of the tokens of every session,
// so that a slow store holds up the change watcher this long at most.
const tokenRecheckTimeout = 10 * time.Second

// recheck disconnects sessions whose token was revoked while this
// server was not listening, and applies the edits and rotations it missed. It reads each token once, and blocks at most
// tokenRecheckTimeout: tokens it could not read in time keep their
// sessions until the next resync.
func (ts *tokenSessions) recheck(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, tokenRecheckTimeout)
	defer cancel()
	checked := make(map[string]bool)
	for _, s := range ts.tunnels.Sessions() {
		id := s.Identity().TokenID
		if id == "" || checked[id] {
			continue
		}
		checked[id] = true
		t, err := ts.db.Token(ctx, "", id)
		if err != nil {
			continue // unreachable store: keep the client; the next resync checks again
		}
		if t.RevokedAt != nil {
			ts.disconnect(id, "token revoked")
			continue
		}
		// Edits and rotations may have been missed too.
		for _, s := range ts.tunnels.Sessions() {
			if s.Identity().TokenID == id {
				ts.apply(s, t)
			}
		}
	}
}
