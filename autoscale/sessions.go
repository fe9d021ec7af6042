package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/aperio-dev/aperio/internal/control/apitype"
	"github.com/aperio-dev/aperio/internal/control/events"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/store"
	"github.com/aperio-dev/aperio/tunnel"
)

// Session is one tunnel session as Sessions reads it when it announces:
// *tunnel.Session's ID, Identity and Announcement, and Bound, which the
// server answers from the router's registry (router.Registry.Bound).
type Session interface {
	// ID is the session's ID, unique among live sessions.
	ID() string
	// Identity is the token the session authenticated with.
	Identity() tunnel.Identity
	// Announcement is the session's latest announcement.
	Announcement() *tunnel.Announcement
	// Bound reports whether the router accepted the bind of hostname and
	// path for the session's latest announcement.
	Bound(hostname, path string) bool
}

// ArmedBinds tells which binds the router holds armed; *router.Registry
// implements it.
type ArmedBinds interface {
	// ArmedBy reports whether orgID holds an armed record for the bind
	// of hostname and path.
	ArmedBy(orgID, hostname, path string) bool
}

// AuditQueue takes audit entries without blocking on the store;
// *events.Emitter implements it (its Run writes what Offer queued).
type AuditQueue interface {
	// Offer queues ev, or drops it (and counts the drop) when the queue
	// is full.
	Offer(ev events.Event) bool
}

// SessionsConfig configures Sessions.
type SessionsConfig struct {
	// Controller receives the declarations, and each session's departure.
	// Required.
	Controller *Controller
	// Armed tells whether a declared bind is armed already. Required.
	Armed ArmedBinds
	// Arm reloads the router's armed binds from the store. It is called
	// at most once per announcement, when the announcement declared a
	// bind new to its session that is not armed yet, so a client that
	// declares and leaves straight away can still be cold started. It
	// must be safe for concurrent use. Required.
	Arm func(ctx context.Context) error
	// Audit receives the audit entries of refused declarations; nil
	// audits none.
	Audit AuditQueue
	// Logger receives the refusals (at most a line every 10 s), failed
	// arming and recovered panics; nil discards.
	Logger *slog.Logger
	// DownThreshold is the tunnel server's client_down_threshold
	// (tunnel.ServerConfig.DownThreshold). Update waits for an
	// announcement's declarations at most a sixth of it: half the
	// heartbeat interval the tunnel server asks of clients, so that a
	// slow store delays no ack past the next heartbeat. Zero means the
	// tunnel server's default, as tunnel.NewServer applies it; negative
	// is refused.
	DownThreshold time.Duration
}

// Sessions is autoscale's declaration protocol with tunnel sessions: it
// declares each announced scaling block to the Controller, one
// declaration per service bind, and tells it when sessions end. The
// server calls Update after the router applied an announcement and Leave
// after the router forgot the session.
//
// A block is declared only for the binds the router accepted for the
// session (Session.Bound), checked on every announcement, heartbeats
// included: never for a hostname the token may not bind, nor for a
// wildcard wider than the token's patterns. Refused binds, invalid blocks
// and declarations over the record caps are answered with a notice to the
// client (at most maxScalingNotices of them, then a count), a log line at
// most every refusalLogInterval, and an audit entry (scaling_refused) once
// per session, bind and reason within a per-token budget; the rest of the
// client keeps working.
//
// The declarations write to the store, so they run on a per-session
// declarer rather than on the session's control loop: Update waits for
// them at most a sixth of the down threshold, and a slow store delays no
// heartbeat's ack past that. Their audit entries write nothing there:
// they are offered to the audit queue.
//
// Sessions is safe for concurrent use.
type Sessions struct {
	ctl        *Controller
	armedBinds ArmedBinds
	// arm reloads the router's armed binds from the store.
	arm func(ctx context.Context) error
	log *slog.Logger

	// armed remembers, per session, the binds whose arming it already
	// checked, so a bind that stays unarmed (disarmed by the breaker)
	// does not reload the records on every heartbeat.
	armed *sessionKeys
	// refusals rate-limits the log line of refused declarations.
	refusals *refusalLog
	// audit queues the audit entries of refused declarations, each once
	// per session, bind and reason (audited), within a per-token budget
	// (auditBudget). Its owner's Run writes them: a declaration never
	// waits for the audit log, so neither does the ack that waits for it.
	audit       AuditQueue
	audited     *sessionKeys
	auditBudget *events.RefusalBudget
	// declarers runs each session's declarations off its control loop.
	declarers *declarers
	// wait is how long Update waits for an announcement's declarations
	// before the ack goes without their notices.
	wait time.Duration
}

// NewSessions returns the declaration protocol of cfg.Controller. It
// starts nothing: each session's declarer starts with its first
// announcement and ends with Leave.
func NewSessions(cfg SessionsConfig) (*Sessions, error) {
	var errs []error
	if cfg.Controller == nil {
		errs = append(errs, errors.New("autoscale: sessions: no controller"))
	}
	if cfg.Armed == nil || cfg.Arm == nil {
		errs = append(errs, errors.New("autoscale: sessions: no armed binds to read or reload"))
	}
	if cfg.DownThreshold < 0 {
		errs = append(errs, fmt.Errorf("autoscale: sessions: down threshold %v is negative", cfg.DownThreshold))
	}
	if cfg.DownThreshold == 0 {
		cfg.DownThreshold = tunnel.DefaultServerConfig().DownThreshold
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ss := &Sessions{ctl: cfg.Controller, armedBinds: cfg.Armed, arm: cfg.Arm, log: log, armed: &sessionKeys{},
		refusals: newRefusalLog(), declarers: &declarers{log: log, m: make(map[string]*declarer)},
		audit: cfg.Audit, audited: &sessionKeys{}, auditBudget: events.NewRefusalBudget(time.Now),
		wait: declareWait(cfg.DownThreshold)}
	ss.declarers.declare = ss.declare
	return ss, nil
}

// SessionStats counts what Sessions did so as not to hold up acks.
type SessionStats struct {
	// Coalesced counts the announcements whose declarations a newer
	// announcement of the same session replaced before they ran.
	Coalesced int64
	// Late counts the acks Update let go before their announcement's
	// declarations were done, the store taking longer than its wait.
	Late int64
}

// Stats returns the counts since NewSessions. It does not block.
func (ss *Sessions) Stats() SessionStats {
	return SessionStats{Coalesced: ss.declarers.stats.coalesced.Load(), Late: ss.declarers.stats.late.Load()}
}

// declareWait is how long an ack waits for the scaling declarations of
// its announcement: half the heartbeat interval the tunnel server asks of
// clients (a third of client_down_threshold), so that a slow store delays
// no ack past the next heartbeat.
func declareWait(downThreshold time.Duration) time.Duration {
	return downThreshold / 6
}

// maxScalingNotices bounds the scaling notices of one announcement: a
// client announcing a thousand refused names gets this many, then a count.
const maxScalingNotices = 8

// refusalLogInterval is the least time between two log lines of refused
// scaling declarations, server-wide.
const refusalLogInterval = 10 * time.Second

// refusalLog writes at most one line per refusalLogInterval, counting the
// refusals it kept quiet about. It is safe for concurrent use.
type refusalLog struct {
	every      rate.Sometimes
	suppressed atomic.Int64
}

func newRefusalLog() *refusalLog {
	return &refusalLog{every: rate.Sometimes{Interval: refusalLogInterval}}
}

// refused logs the n refused declarations of one announcement of session
// (first is the first refused hostname, err its reason), or counts them
// while the interval runs.
func (l *refusalLog) refused(log *slog.Logger, id tunnel.Identity, session string, n int, first string, err error) {
	logged := false
	l.every.Do(func() {
		logged = true
		log.Warn("scaling declarations refused", logkey.SessionID, session, logkey.TokenID, id.TokenID,
			logkey.OrgID, id.OrgID, logkey.Count, n, logkey.First, first, logkey.Err, err,
			logkey.Suppressed, l.suppressed.Swap(0))
	})
	if !logged {
		l.suppressed.Add(int64(n))
	}
}

// sessionKeys is a set of keys per session, safe for concurrent use.
type sessionKeys struct {
	mu sync.Mutex // guards m
	m  map[string]map[string]bool
}

// first reports whether key is new for session, and records it.
func (sk *sessionKeys) first(session, key string) bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.m == nil {
		sk.m = make(map[string]map[string]bool)
	}
	if sk.m[session] == nil {
		sk.m[session] = make(map[string]bool)
	}
	if sk.m[session][key] {
		return false
	}
	sk.m[session][key] = true
	return true
}

// firstWithin is first, except that it records nothing and reports false
// once session holds limit entries: what a session can make the set hold
// stays bounded whatever it announces.
func (sk *sessionKeys) firstWithin(session, key string, limit int) bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	if sk.m == nil {
		sk.m = make(map[string]map[string]bool)
	}
	set := sk.m[session]
	if set == nil {
		set = make(map[string]bool)
		sk.m[session] = set
	}
	if set[key] || len(set) >= limit {
		return false
	}
	set[key] = true
	return true
}

func (sk *sessionKeys) forget(session string) {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	delete(sk.m, session)
}

// errNotBound refuses a declaration for a bind the router did not accept
// for the session.
var errNotBound = errors.New("the hostname is not bound by this session")

// Update, once the router applied s's announcement, hands its
// declarations to the session's declarer and waits for them at most a
// sixth of the down threshold, so a slow store never holds up the
// heartbeat's ack. It returns the notices for the client: those of this
// announcement's declarations when they are done in time, and otherwise
// those of the latest declarations that ran (each later ack carries the
// notices of the latest that ran). ctx is the session's, and the lifetime
// of its declarations: it must stay live until Leave of the session
// returns. Update does not block on the store beyond that wait, or ctx.
func (ss *Sessions) Update(ctx context.Context, s Session) []string {
	job := ss.plan(s)
	if job == nil {
		return nil
	}
	d := ss.declarers.get(ctx, s.ID())
	done := d.submit(job)
	t := time.NewTimer(ss.wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		ss.declarers.stats.late.Add(1)
	case <-ctx.Done():
	}
	return d.lastNotices()
}

// plan returns the declarations of s's announcement, or nil when it
// declares no scaling block. It reads only the router.
func (ss *Sessions) plan(s Session) *declareJob {
	ann := s.Announcement()
	if ann.Scaling == nil {
		return nil
	}
	id := s.Identity()
	armer := id.TokenID
	if armer == "" {
		armer = apitype.Master
	}
	sc := ann.Scaling
	job := &declareJob{id: id, session: s.ID(), armer: armer, block: *sc}
	seen := map[string]bool{}
	for _, svc := range ann.Services {
		for _, h := range svc.Hostnames {
			key := h + "\x00" + svc.Path
			if seen[key] {
				continue
			}
			seen[key] = true
			job.binds = append(job.binds, declareBind{hostname: h, path: svc.Path, bound: s.Bound(h, svc.Path)})
		}
	}
	return job
}

// declareTimeout bounds the store I/O of one job: its declarations, and
// the reload of the armed binds they may call for.
const declareTimeout = 5 * time.Second

// declare runs job: it declares each bound bind to the controller and
// returns the notices for the client. It blocks on the store, at most
// declareTimeout.
func (ss *Sessions) declare(ctx context.Context, job *declareJob) []string {
	ctx, cancel := context.WithTimeout(ctx, declareTimeout)
	defer cancel()
	var notices []string
	refused, firstRefused, arm := 0, "", false
	var firstErr error
	for _, b := range job.binds {
		err := errNotBound
		if b.bound {
			err = ss.ctl.Declare(ctx, SessionDeclaration{OrgID: job.id.OrgID, Hostname: b.hostname, Path: b.path,
				Session: job.session, Armer: job.armer, Block: job.block})
		}
		if err != nil {
			ss.auditRefusal(job, b, err)
			if refused == 0 {
				firstRefused, firstErr = b.hostname, err
			}
			refused++
			if refused <= maxScalingNotices {
				notices = append(notices, "scaling declaration for "+b.hostname+" refused: "+err.Error())
			}
			continue
		}
		// A bind declared for the first time is armed at once rather
		// than at the next debounced reload, so a client that declares
		// and leaves straight away can still be cold started. One
		// reload covers every new bind of the announcement.
		if ss.armed.first(job.session, b.hostname+"\x00"+b.path) && !ss.armedBinds.ArmedBy(job.id.OrgID, b.hostname, b.path) {
			arm = true
		}
	}
	if refused > maxScalingNotices {
		notices = append(notices, fmt.Sprintf("%d more scaling declarations refused", refused-maxScalingNotices))
	}
	if refused > 0 {
		ss.refusals.refused(ss.log, job.id, job.session, refused, firstRefused, firstErr)
	}
	if arm {
		if err := ss.arm(ctx); err != nil {
			ss.log.Error("arming new scaling records failed", logkey.SessionID, job.session, logkey.Err, err)
		}
	}
	return notices
}

// eventScalingRefused is the audit event of a scaling declaration the
// server refused: an invalid block (max below min, a URL the outbound
// policy refuses, …), a bind the session may not arm, another
// organization's bind, or a record cap.
const eventScalingRefused = "scaling_refused"

// maxRefusalAuditsPerSession bounds the distinct refusals (bind and
// reason) audited for one session: a client that changes its block on
// every heartbeat cannot grow the audit log, or the memory that
// deduplicates it, without bound.
const maxRefusalAuditsPerSession = 64

// auditRefusal audits the refusal of b's declaration, once per session,
// bind and reason (a heartbeat repeats its declarations), within the
// token's budget of refusal audits. The entry is offered to the audit
// queue, not written: it never blocks on the store. An entry the full
// queue drops is counted there and reported by the next entry written;
// the client still has its notice.
func (ss *Sessions) auditRefusal(job *declareJob, b declareBind, err error) {
	if ss.audit == nil {
		return
	}
	if !ss.audited.firstWithin(job.session, "refused\x00"+b.hostname+"\x00"+b.path+"\x00"+err.Error(), maxRefusalAuditsPerSession) {
		return
	}
	actor := store.ClientActor(job.id.TokenID)
	if ok, _, _ := ss.auditBudget.Admit(actor.String()); !ok {
		return
	}
	detail := "scaling declaration refused: " + err.Error()
	if b.path != "" {
		detail = "scaling declaration for path " + b.path + " refused: " + err.Error()
	}
	ss.audit.Offer(events.Event{Kind: eventScalingRefused, OrgID: job.id.OrgID, Actor: actor,
		Hostname: b.hostname, Path: b.path, Detail: detail})
}

// Leave, once the router has taken the session out, waits for its
// declarations (see declarer.close) before it leaves the controller, so a
// declaration still running cannot bring a departed session back. It
// blocks for at most two jobs' store I/O (declareTimeout each).
func (ss *Sessions) Leave(session string) {
	ss.declarers.close(session)
	ss.ctl.Leave(session)
	ss.armed.forget(session)
	ss.audited.forget(session)
}
