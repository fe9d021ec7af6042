package oidc

import (
	"context"
	"sync"
	"time"

	"github.com/aperio-dev/aperio/internal/b64"
)

// revokeTimeout bounds the write of a logout's revocation.
const revokeTimeout = 5 * time.Second

// Revocation ends sessions before their sealed expiry, on one hostname:
// the session SessionID (a logout), every session of a user (Subject or
// Email) issued at or before RevokedAt, or every session of the hostname
// (neither) issued at or before RevokedAt.
type Revocation struct {
	Host           string
	SessionID      string
	Subject, Email string
	RevokedAt      time.Time
	// ExpiresAt is when every session the revocation ends has expired.
	ExpiresAt time.Time
}

// Revoker records a revocation where every server that checks sessions
// sees it (the store, followed through its change feed, which fills each
// server's Denylist). It returns once the revocation is durable.
type Revoker interface {
	RevokeSession(ctx context.Context, r Revocation) error
}

// Denylist is a server's copy of the revocations in force, checked on
// every use of a session (Provider.Check, App.Session). The server fills
// it from the store and follows the store's changes; a logout on this
// server adds its revocation at once. The zero value is empty and ready;
// a nil *Denylist revokes nothing. It is safe for concurrent use: the
// check takes a read lock and makes no allocation.
type Denylist struct {
	mu    sync.RWMutex // guards hosts
	hosts map[string]*hostDenials
}

// hostDenials are the revocations of one hostname.
type hostDenials struct {
	sessions map[string]struct{}  // by the id's raw bytes
	subjects map[string]time.Time // revoked at, the latest
	emails   map[string]time.Time
	all      time.Time // the latest revocation of every session; zero: none
}

func (h *hostDenials) add(r Revocation) {
	switch {
	case r.SessionID != "":
		id, err := b64.DecodeRawURL(r.SessionID)
		if err != nil || len(id) != idBytes {
			return // no session has such an id
		}
		if h.sessions == nil {
			h.sessions = make(map[string]struct{})
		}
		h.sessions[string(id)] = struct{}{}
	case r.Subject == "" && r.Email == "":
		h.all = later(h.all, r.RevokedAt)
	default:
		if r.Subject != "" {
			if h.subjects == nil {
				h.subjects = make(map[string]time.Time)
			}
			h.subjects[r.Subject] = later(h.subjects[r.Subject], r.RevokedAt)
		}
		if r.Email != "" {
			if h.emails == nil {
				h.emails = make(map[string]time.Time)
			}
			h.emails[r.Email] = later(h.emails[r.Email], r.RevokedAt)
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// revoked reports whether s is one of the sessions h ends.
func (h *hostDenials) revoked(s *Session) bool {
	if _, ok := h.sessions[string(s.id[:])]; ok {
		return true
	}
	issuedBy := func(at time.Time) bool { return !at.IsZero() && !s.IssuedAt.After(at) }
	if issuedBy(h.all) {
		return true
	}
	if s.Subject != "" && issuedBy(h.subjects[s.Subject]) {
		return true
	}
	return s.Email != "" && issuedBy(h.emails[s.Email])
}

// Add adds r.
func (d *Denylist) Add(r Revocation) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = make(map[string]*hostDenials)
	}
	h := d.hosts[r.Host]
	if h == nil {
		h = new(hostDenials)
		d.hosts[r.Host] = h
	}
	h.add(r)
}

// ReplaceHost replaces the revocations of host with rs (all of host's
// revocations in force, as the store lists them).
func (d *Denylist) ReplaceHost(host string, rs []Revocation) {
	h := new(hostDenials)
	for _, r := range rs {
		h.add(r)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = make(map[string]*hostDenials)
	}
	if len(rs) == 0 {
		delete(d.hosts, host)
		return
	}
	d.hosts[host] = h
}

// Replace replaces every revocation with rs (every revocation in force,
// as the store lists them).
func (d *Denylist) Replace(rs []Revocation) {
	hosts := make(map[string]*hostDenials)
	for _, r := range rs {
		h := hosts[r.Host]
		if h == nil {
			h = new(hostDenials)
			hosts[r.Host] = h
		}
		h.add(r)
	}
	d.mu.Lock()
	d.hosts = hosts
	d.mu.Unlock()
}

// Revoked reports whether a revocation ends s.
func (d *Denylist) Revoked(s *Session) bool {
	if d == nil {
		return false
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	h := d.hosts[s.Host]
	return h != nil && h.revoked(s)
}

// Len returns how many hostnames have revocations in force, for metrics
// and tests.
func (d *Denylist) Len() int {
	if d == nil {
		return 0
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.hosts)
}

// revoke records the end of s: in the Revoker, when there is one, and in
// the Denylist at once, so that this server refuses s even before the
// store's change comes back. The error is the Revoker's: the session is
// then ended on this server only.
func (p *Provider) revoke(ctx context.Context, s Session) error {
	r := Revocation{Host: s.Host, SessionID: s.ID(), Subject: s.Subject, Email: s.Email, RevokedAt: p.cfg.Now(), ExpiresAt: s.Expires}
	p.cfg.Denylist.Add(r)
	if p.cfg.Revoker == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	return p.cfg.Revoker.RevokeSession(ctx, r)
}
