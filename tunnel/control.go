package tunnel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/yamux"
)

// Defaults of the session limits in ServerConfig.
const (
	// DefaultMaxStreams is ServerConfig.MaxStreams: 256 streams of a 2 MiB
	// window bound one session's unread data to 512 MiB.
	DefaultMaxStreams = 256
	// DefaultAnnounceInterval is ServerConfig.AnnounceInterval: at most
	// five announcements applied per second and session, while the
	// client's adaptive-concurrency heartbeats (at most one per 250 ms)
	// pass unheld.
	DefaultAnnounceInterval = 200 * time.Millisecond
)

// serveControl reads heartbeats until the session ends or misses one. It
// applies at most one announcement per AnnounceInterval: a heartbeat that
// comes sooner is held, and a newer one replaces it (its ack then covers
// both sequence numbers), so a client flooding changes costs the registry
// a bounded rate of updates. Liveness, token expiry and validation are
// checked on every heartbeat as it arrives.
//
// It reads the control stream itself, with a read deadline that is the
// sooner of the next heartbeat's and the held one's: the goroutine a
// separate reader took would be blocked for the client's whole
// connection, one more per connected client. A read that the held
// heartbeat's time cuts short mid-frame goes on where it stopped
// (frameReader).
func (s *Server) serveControl(ctx context.Context, sess *Session, ctrl *yamux.Stream) error {
	var (
		fr      frameReader
		due     = time.Now().Add(s.cfg.DownThreshold) // the next heartbeat must have come by then
		pending *message                              // the latest heartbeat not applied yet
		holdTo  time.Time                             // when pending may be applied
		last    time.Time                             // when the last announcement was applied
	)
	// Decoding, apply and the validation below run on fresh stacks: this
	// goroutine lives as long as the session (onFreshStack).
	apply := func(m *message) error {
		sess.ann.Store(m.Announcement)
		last = time.Now()
		notices, _ := onFreshStack(func() ([]string, error) {
			return identityNotices(s.cfg.Registry.Update(ctx, sess), sess), nil
		})
		return sess.writeControl(&message{Type: msgAck, Notices: notices, Seq: m.Seq, Drain: sess.drainAsked.Load(), Exposed: sess.Exposed()}, s.cfg.DownThreshold)
	}
	validate := func(a *Announcement) error {
		_, err := onFreshStack(func() (struct{}, error) { return struct{}{}, a.Validate() })
		return err
	}
	for {
		if pending != nil && !time.Now().Before(holdTo) {
			m := pending
			pending = nil
			if err := apply(m); err != nil {
				return err
			}
		}
		deadline := due
		if pending != nil && holdTo.Before(deadline) {
			deadline = holdTo
		}
		ctrl.SetReadDeadline(deadline)
		body, err := fr.next(ctrl)
		if err != nil {
			if !errors.Is(err, yamux.ErrTimeout) {
				return err
			}
			if time.Now().Before(due) {
				continue // the held heartbeat's time: applied above
			}
			return errHeartbeatMissed
		}
		due = time.Now().Add(s.cfg.DownThreshold)
		m, err := onFreshStack(func() (*message, error) { return decodeMessage(body) })
		if err != nil {
			return err
		}
		if m.Type != msgHeartbeat {
			return fmt.Errorf("tunnel: unexpected %s frame", m.Type)
		}
		if id := sess.Identity(); !id.ExpiresAt.IsZero() && time.Now().After(id.ExpiresAt) {
			reason := id.EndReason
			if reason == "" {
				reason = "token expired"
			}
			sess.writeControl(&message{Type: msgGoAway, Reason: reason}, time.Second)
			return errTokenExpired
		}
		if err := validate(m.Announcement); err != nil {
			sess.writeControl(&message{Type: msgGoAway, Reason: err.Error()}, time.Second)
			return err
		}
		if pending != nil {
			pending = m // applied at holdTo, the newest
			continue
		}
		if holdTo = last.Add(s.cfg.AnnounceInterval); !time.Now().Before(holdTo) {
			if err := apply(m); err != nil {
				return err
			}
			continue
		}
		pending = m
	}
}

// identityNotices returns notices with the session identity's Notice
// after them, if it has one; notices itself is not modified (the registry
// may keep it).
func identityNotices(notices []string, sess *Session) []string {
	n := sess.Identity().Notice
	if n == "" {
		return notices
	}
	return append(slices.Clip(notices), n)
}
