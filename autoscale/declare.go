package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// Defaults and bounds of a scaling block (docs/autoscaling.md). They are
// tunnel's, where the scaling block's type and rules live: aperio-client
// applies the same.
const (
	// DefaultColdStart is how long a visitor may be held while a cold
	// start runs, when the block does not say.
	DefaultColdStart = tunnel.DefaultColdStart
	// MaxColdStart caps cold_start; a longer one is cut to it.
	MaxColdStart = tunnel.MaxColdStart
	// DefaultTargetUtilization is the scale-out threshold when the block
	// does not say.
	DefaultTargetUtilization = tunnel.DefaultTargetUtilization
	// DefaultWindow is how long utilization must stay at or above target
	// before a scale-out, when the block does not say.
	DefaultWindow = tunnel.DefaultScalingWindow
	// DefaultCooldown is the minimum gap between two calls for one bind,
	// when the block does not say.
	DefaultCooldown = tunnel.DefaultScalingCooldown
	// MinWindow is the smallest window and cooldown accepted.
	MinWindow = tunnel.MinScalingWindow
)

// ErrInvalid is matched (errors.Is) by every error reporting a scaling
// block that breaks the rules; see DeclarationError.
var ErrInvalid = errors.New("autoscale: invalid scaling block")

// DeclarationError reports every problem of a refused scaling block. Its
// text is meant for the announcing client, which logs it; it never
// contains the secret or the URL.
type DeclarationError struct {
	// Hostname is the service hostname the block was declared for; ""
	// when the block was checked on its own (Normalize).
	Hostname string
	// Problems lists each broken rule, in field order.
	Problems []string
}

func (e *DeclarationError) Error() string {
	var sb strings.Builder
	sb.WriteString("autoscale: invalid scaling block")
	if e.Hostname != "" {
		sb.WriteString(" for ")
		sb.WriteString(e.Hostname)
	}
	sb.WriteString(": ")
	sb.WriteString(strings.Join(e.Problems, "; "))
	return sb.String()
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *DeclarationError) Is(target error) bool { return target == ErrInvalid }

// Declaration is a client's scaling block as announced: tunnel's one
// scaling type, whose fields, defaults and rules it documents. A zero
// field means the default (Scaling.WithDefaults).
type Declaration = tunnel.Scaling

// withDefaultMax returns r with Max set to tunnel.DefaultScalingMax(r.Min)
// when it is 0: a record stored before max had a default still holds 0,
// and a call for it must not say "max":0 next to a desired of 1 or more.
func withDefaultMax(r Record) Record {
	if r.Max <= 0 {
		r.Max = tunnel.DefaultScalingMax(r.Min)
	}
	return r
}

// Normalize applies the defaults, cuts ColdStart to MaxColdStart, drops
// sub-millisecond parts of durations (the store keeps milliseconds), and
// checks the rules. The error is a *DeclarationError listing every
// problem.
func Normalize(d Declaration) (Declaration, error) {
	n, problems := normalize(d)
	if len(problems) > 0 {
		return Declaration{}, &DeclarationError{Problems: problems}
	}
	return n, nil
}

// normalize is Normalize, returning the problems as text: tunnel's
// defaults and rules (tunnel.Scaling), with a cold_start above the
// maximum cut to it rather than refused.
func normalize(d Declaration) (Declaration, []string) {
	d = d.WithDefaults()
	d.ColdStart = min(d.ColdStart, MaxColdStart).Truncate(time.Millisecond)
	d.Window = d.Window.Truncate(time.Millisecond)
	d.Cooldown = d.Cooldown.Truncate(time.Millisecond)
	var problems []string
	for _, p := range d.Problems() {
		problems = append(problems, p.Error())
	}
	return d, problems
}

// declares reports whether r holds exactly declaration d.
func declares(r *Record, d Declaration) bool {
	return r.Scaling == d
}

// SessionDeclaration is one client session declaring a scaling block for
// one service hostname (a client with several services or hostnames
// declares each separately). It is autoscale's side of what
// tunnel.Announcement carries.
type SessionDeclaration struct {
	// OrgID, Hostname and Path name the bind, normalized exactly as the
	// router names its pools (Path "" means none).
	OrgID, Hostname, Path string
	// Session identifies the announcing client session (one per client
	// process connection). The first announcement of a session re-arms the
	// record; see Controller.Declare.
	Session string
	// Armer is the ID of the token that announced it ("master" for the
	// master token); the record goes when its last armer is revoked.
	Armer string
	// Block is the announced block, before defaults.
	Block Declaration
}

// announcer is one live session's declaration for a bind.
type announcer struct {
	order    uint64 // when the session first announced; newest wins
	decl     Declaration
	declared bool // a DeclareScaling for this session has succeeded
}

// Declare records a client's announcement of a's block. It is called on
// every announcement (each heartbeat included) and blocks on the store.
//
// An invalid block, or one whose URL Config.Policy refuses, returns a
// *DeclarationError (errors.Is ErrInvalid) whose text the server sends
// back to the client, and List shows it until a valid declaration of the
// bind or the session's end; the rest of the client's announcement is
// unaffected, and a record already stored keeps its older block. A declaration for a bind another
// organization holds a record for is refused with ErrBindTaken, and one
// over Config.MaxRecordsPerOrg or Config.MaxRecordsPerToken with
// ErrRecordLimit; both are decided in memory, without a store access.
// Declare does not check that the armer may bind the hostname: the caller
// declares only binds its router accepted for the session.
//
// The record is re-armed (breaker and failure count cleared, backoff
// forgotten) when a new session announces it, when the declaration differs
// from the stored one, or when a conflict has just resolved; unchanged
// heartbeats of a session already announced never re-arm. When live
// sessions declare different blocks for one bind, the newest session's
// block is stored, flagged Conflict, and nothing is re-armed or reset:
// neither the cooldown nor the failure count. Declare is safe for
// concurrent use; announcements for one bind are serialized.
func (c *Controller) Declare(ctx context.Context, a SessionDeclaration) error {
	d, err := c.validateDeclaration(a)
	if err != nil {
		return err
	}
	if a.Session == "" || a.Armer == "" {
		return errors.New("autoscale: declare: empty session or armer")
	}
	t, err := c.beginDeclare(ctx, a, d)
	if err != nil {
		return fmt.Errorf("autoscale: declare %s%s: %w", a.Hostname, a.Path, err)
	}

	// The store, off the owner: the record is read only when the
	// controller does not know it, and written only when the plan says so.
	p, got, err := declarePlan{}, Record{}, error(nil)
	if t.in.stored == nil {
		r, rerr := c.store.ScalingRecordByBind(ctx, a.OrgID, a.Hostname, a.Path)
		switch {
		case rerr == nil && r.OrgID == a.OrgID:
			t.in.stored = &r
		case rerr != nil && !errors.Is(rerr, store.ErrNotFound):
			err = rerr
		}
	}
	if err == nil {
		t.in.now = c.now()
		p = planDeclare(t.in)
		if p.write {
			got, _, err = c.store.DeclareScaling(ctx, p.rec, a.Armer, p.rearm)
		}
	}

	c.endDeclare(t, p, got, err)
	if err != nil {
		return fmt.Errorf("autoscale: declare %s%s: %w", a.Hostname, a.Path, err)
	}
	if p.write && p.note != noteNone {
		c.log.Log(ctx, p.note.level(), p.note.String(), logkey.OrgID, a.OrgID, logkey.Hostname, a.Hostname,
			logkey.Path, a.Path, logkey.SessionID, a.Session, logkey.RecordID, got.ID)
	}
	return nil
}

// declareTurn is one Declare between its planning and its apply: the bind
// whose turn it holds, the announcing session (nil for an operator's Arm),
// its claim on the caps, and what planDeclare reads.
type declareTurn struct {
	b   *bind
	s   *announcer
	res reservation
	in  declareIn
}

// beginDeclare admits a's declaration d (the caps, decided in memory),
// waits for the bind's turn, registers the announcing session and takes
// what planDeclare reads, on the owner once the turn is free. The turn
// must be ended with endDeclare. It fails with the caps' errors, or ctx's
// while it waits, or ErrClosed.
func (c *Controller) beginDeclare(ctx context.Context, a SessionDeclaration, d Declaration) (declareTurn, error) {
	k := bindKey{a.OrgID, a.Hostname, a.Path}
	var t declareTurn
	_, res, err := c.takeTurn(ctx, k, a.Armer, func(b *bind) {
		s := b.sessions[a.Session]
		if s == nil {
			c.seq++
			s = &announcer{order: c.seq}
			b.sessions[a.Session] = s
			c.sessionBinds[a.Session] = append(c.sessionBinds[a.Session], k)
		}
		s.decl = d
		eff, conflict := b.effectiveLocked()
		t = declareTurn{b: b, s: s, in: declareIn{
			key: k, armer: a.Armer, eff: eff, conflict: conflict, newSession: !s.declared,
			refresh: c.cfg.DeclareRefresh,
		}}
		if b.rec != nil {
			r := *b.rec
			t.in.stored = &r
		}
	})
	if err != nil {
		return declareTurn{}, err
	}
	t.res = res
	return t, nil
}

// takeTurn admits armer's declaration for k (the caps, decided in memory,
// see admitLocked), then waits for the bind's turn: on the owner while it
// checks, off it while it waits. Once the turn is its own it runs then(b)
// on the owner, in the same request. It returns the bind, its turn taken
// and a write counted in progress, and the claim on the caps; endDeclare
// ends both. It fails with the caps' errors, ctx's while it waits, or
// ErrClosed once the controller stopped.
func (c *Controller) takeTurn(ctx context.Context, k bindKey, armer string, then func(*bind)) (*bind, reservation, error) {
	var (
		b        *bind
		res      reservation
		err      error
		admitted bool // b.declaring counts this call, res holds its claim
		took     bool // b.turn is this call's
	)
	for {
		var turn chan struct{}
		derr := c.do(ctx, func() {
			if !admitted {
				// Refused before the bind is remembered: a flood of
				// names over the caps leaves nothing behind.
				if res, err = c.admitLocked(k, armer); err != nil {
					return
				}
				if b = c.binds[k]; b == nil {
					b = c.newBindLocked(k)
				}
				b.declaring++ // keeps b from gcLocked while it waits and until endDeclare
				admitted = true
			}
			if b.turn != nil {
				turn = b.turn
				return
			}
			b.turn = make(chan struct{})
			b.writing++
			took = true
			then(b)
		})
		switch {
		case derr == nil && err != nil:
			return nil, reservation{}, err
		case derr == nil && turn == nil:
			return b, res, nil
		case derr == nil:
			select {
			case <-turn:
				continue
			case <-ctx.Done():
				derr = ctx.Err()
			case <-c.ownerDone:
				derr = ErrClosed
			}
		}
		// Given up (or then panicked): undo what this call holds. A
		// stopped owner holds nothing anyone waits for.
		if admitted {
			_ = c.do(context.WithoutCancel(ctx), func() {
				if took {
					close(b.turn)
					b.turn = nil
					b.writing--
				}
				c.quota.releaseLocked(&res)
				b.declaring--
				c.gcLocked(b)
			})
		}
		return nil, reservation{}, derr
	}
}

// endDeclare applies the outcome of a turn's plan p, under one lock: the
// record the write stored (got), unless it failed (err), and the session
// counts as declared once its declaration is stored or found stored. The
// claim on the caps goes in the same critical section as the record that
// now counts itself, so the caps never count it twice. It ends the turn.
func (c *Controller) endDeclare(t declareTurn, p declarePlan, got Record, err error) {
	// Failing, the owner has stopped: nobody waits for the turn.
	_ = c.do(context.Background(), func() { c.endDeclareLocked(t, p, got, err) })
}

// endDeclareLocked is endDeclare, on the owner.
func (c *Controller) endDeclareLocked(t declareTurn, p declarePlan, got Record, err error) {
	b := t.b
	if err == nil {
		if t.s != nil {
			t.s.declared = true
		}
		if p.write {
			c.applyLocked(b, got, p.rearm)
		}
	}
	c.quota.releaseLocked(&t.res)
	b.writing--
	if p.write {
		c.landLocked(b)
	}
	close(b.turn)
	b.turn = nil
	b.declaring--
	c.gcLocked(b)
}

// declareIn is what planDeclare reads: a valid announcement's bind and
// armer, the live sessions' verdict on it, and the record as stored.
type declareIn struct {
	key   bindKey
	armer string
	// eff is the declaration that wins: the newest live session's.
	eff Declaration
	// conflict is set when another live session declares something else.
	conflict bool
	// newSession is set until a declaration of the announcing session has
	// been stored (or found stored).
	newSession bool
	// stored is the record as last known or read; nil when there is none.
	stored *Record
	now    time.Time
	// refresh is Config.DeclareRefresh.
	refresh time.Duration
}

// declarePlan is what an announcement does to a bind's record.
type declarePlan struct {
	// write is unset when the stored record already says everything: the
	// session then counts as declared and nothing is stored.
	write bool
	// rec is the record to upsert (DeclareScaling), with rearm.
	rec   Record
	rearm bool
	// note is the state change to log once the write has landed.
	note declareNote
}

// declareNote is a state change of a record that Declare logs.
type declareNote int

const (
	noteNone     declareNote = iota
	noteConflict             // live sessions declare different blocks
	noteArmed                // the record was created
	noteRearmed              // a disarmed record was armed again
	noteChanged              // the declaration changed
)

// String returns the log message of the note.
func (n declareNote) String() string {
	switch n {
	case noteConflict:
		return "scaling declaration conflict"
	case noteArmed:
		return "scaling record armed"
	case noteRearmed:
		return "scaling record re-armed"
	case noteChanged:
		return "scaling declaration changed"
	}
	return ""
}

// level is the log level of the note: a conflict is an anomaly the
// operator should see, the rest are lifecycle changes.
func (n declareNote) level() slog.Level {
	if n == noteConflict {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// planDeclare decides what an announcement writes. It reads no clock and
// changes nothing.
//
// The record is re-armed (breaker and failure count cleared) when a new
// session announces it, when the declaration differs from the stored one,
// or when a conflict has just resolved, but never while a conflict lasts:
// the newest session's block is then stored, flagged Conflict. A record
// that already holds the declaration, armed by the armer, without
// conflict or failures and written less than refresh ago, is not written:
// every heartbeat of every client declares, and UpdatedAt only feeds the
// TTL sweep.
func planDeclare(in declareIn) declarePlan {
	stored, eff, conflict := in.stored, in.eff, in.conflict
	changed := stored == nil || !declares(stored, eff)
	resolved := stored != nil && stored.Conflict && !conflict
	rearm := (in.newSession || changed || resolved) && !conflict

	if stored != nil && !changed && !resolved && !conflict && !stored.Conflict && !stored.Disarmed &&
		stored.ConsecutiveFailures == 0 && slices.Contains(stored.ArmedBy, in.armer) &&
		in.now.Sub(stored.UpdatedAt) < in.refresh {
		// Re-arming a record that is armed with no failures changes
		// nothing either, so a new session's declaration is skipped too.
		return declarePlan{}
	}

	p := declarePlan{
		write: true,
		rec: Record{
			OrgID: in.key.org, Hostname: in.key.host, Path: in.key.path,
			Scaling:  eff,
			Conflict: conflict,
		},
		rearm: rearm,
	}
	switch {
	case conflict && (in.newSession || changed):
		p.note = noteConflict
	case stored == nil:
		p.note = noteArmed
	case rearm && stored.Disarmed:
		p.note = noteRearmed
	case changed:
		p.note = noteChanged
	}
	return p
}

// effectiveLocked returns the declaration that wins for b (the newest live
// session's) and whether another live session declares something else.
func (b *bind) effectiveLocked() (Declaration, bool) {
	var newest *announcer
	for _, s := range b.sessions {
		if newest == nil || s.order > newest.order {
			newest = s
		}
	}
	conflict := false
	for _, s := range b.sessions {
		if s.decl != newest.decl {
			conflict = true
		}
	}
	return newest.decl, conflict
}

// Leave forgets a client session: it no longer counts for conflicts, and
// if it announces again it is a new session. Call it when the session
// ends. The records it armed stay. Leave is safe for concurrent use; it
// waits only for the owner's reply.
func (c *Controller) Leave(session string) {
	c.refused.leave(session)
	// Failing, the owner has stopped: there is nothing left to forget.
	_ = c.do(context.Background(), func() { c.leaveLocked(session) })
}

// leaveLocked is Leave, on the owner.
func (c *Controller) leaveLocked(session string) {
	for _, k := range c.sessionBinds[session] {
		if b := c.binds[k]; b != nil {
			delete(b.sessions, session)
			c.gcLocked(b)
		}
	}
	delete(c.sessionBinds, session)
}
