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

// controlRead is one message read from the control stream, or the error
// that ended the reading.
type controlRead struct {
	m   *message
	err error
}

// controlReader reads control frames on its own goroutine so that the
// control loop can hold a heartbeat without holding up the next read. It is
// a named type so that its goroutine reads well in stack dumps.
type controlReader struct {
	ctrl    *yamux.Stream
	timeout time.Duration // read deadline of each frame
	out     chan<- controlRead
	stop    <-chan struct{}
}

func (r *controlReader) run() {
	for {
		r.ctrl.SetReadDeadline(time.Now().Add(r.timeout))
		// The frame is read here, and decoded on a fresh stack: this
		// goroutine lives as long as the session (onFreshStack).
		body, err := readFrame(r.ctrl)
		var m *message
		if err == nil {
			m, err = onFreshStack(func() (*message, error) { return decodeMessage(body) })
		}
		select {
		case r.out <- controlRead{m, err}:
		case <-r.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// serveControl reads heartbeats until the session ends or misses one. It
// applies at most one announcement per AnnounceInterval: a heartbeat that
// comes sooner is held, and a newer one replaces it (its ack then covers
// both sequence numbers), so a client flooding changes costs the registry
// a bounded rate of updates. Liveness, token expiry and validation are
// checked on every heartbeat as it arrives.
func (s *Server) serveControl(ctx context.Context, sess *Session, ctrl *yamux.Stream) error {
	reads := make(chan controlRead)
	stop := make(chan struct{})
	done := make(chan struct{})
	r := &controlReader{ctrl: ctrl, timeout: s.cfg.DownThreshold, out: reads, stop: stop}
	go func() {
		defer close(done)
		r.run()
	}()
	defer func() {
		close(stop)
		ctrl.SetReadDeadline(time.Unix(1, 0)) // end a read in progress
		<-done
	}()

	var (
		pending *message    // the latest heartbeat not applied yet
		hold    *time.Timer // fires when pending may be applied
		holdC   <-chan time.Time
		last    time.Time // when the last announcement was applied
	)
	defer func() {
		if hold != nil {
			hold.Stop()
		}
	}()
	// apply and the validation below run on fresh stacks: this goroutine
	// lives as long as the session (onFreshStack).
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
		select {
		case <-holdC:
			m := pending
			pending, holdC = nil, nil
			if err := apply(m); err != nil {
				return err
			}
		case rd := <-reads:
			if rd.err != nil {
				if errors.Is(rd.err, yamux.ErrTimeout) {
					return errHeartbeatMissed
				}
				return rd.err
			}
			m := rd.m
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
				pending = m // the held timer applies the newest
				continue
			}
			wait := s.cfg.AnnounceInterval - time.Since(last)
			if wait <= 0 {
				if err := apply(m); err != nil {
					return err
				}
				continue
			}
			pending = m
			if hold == nil {
				hold = time.NewTimer(wait)
			} else {
				hold.Reset(wait)
			}
			holdC = hold.C
		}
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
