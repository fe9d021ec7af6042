package autoscale

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aperio-dev/aperio/internal/recovery"
	"github.com/aperio-dev/aperio/tunnel"
)

// declareBind is one distinct bind of an announcement, and whether the
// router accepted it for the session when the announcement was applied.
type declareBind struct {
	hostname, path string
	bound          bool
}

// declareJob is the scaling declarations of one announcement, planned on
// the session's goroutine against the router's binds of that announcement.
type declareJob struct {
	id      tunnel.Identity
	session string
	armer   string
	block   Declaration
	binds   []declareBind
	// done is closed once the job, or a newer one that replaced it before
	// it started, has run.
	done chan struct{}
}

// declarer runs the declarations of one session on a goroutine of its
// own, one job at a time and in the order of the session's announcements.
// Its queue holds one job: a newer announcement replaces the one waiting,
// since each declares the session's whole scaling state, so a session
// costs the store at most one job in flight and one waiting, however fast
// it announces and however slow the store is.
type declarer struct {
	// ctx is the session's, the declarer's lifetime: it ends after
	// Sessions.Leave, which waits for the declarer's jobs, so it is live
	// for every job.
	ctx     context.Context
	declare func(context.Context, *declareJob) []string // runs one job, returns its notices
	stats   *declareStats                               // counts the jobs replaced; nil counts nothing
	log     *slog.Logger                                // receives recovered panics
	wg      sync.WaitGroup                              // the running goroutine, if any

	mu      sync.Mutex // guards the following fields
	next    *declareJob
	running bool
	closed  bool
	notices []string // of the last job run
}

// submit queues job in place of the one waiting, if any, starts the
// goroutine when none runs, and returns a channel closed once job, or a
// newer one, has run. After close it returns a closed channel and drops
// job. It does not block on the store.
func (d *declarer) submit(job *declareJob) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		done := make(chan struct{})
		close(done)
		return done
	}
	if d.next != nil {
		job.done = d.next.done
		if d.stats != nil {
			d.stats.coalesced.Add(1)
		}
	} else {
		job.done = make(chan struct{})
	}
	d.next = job
	if !d.running {
		d.running = true
		d.wg.Add(1)
		go d.run()
	}
	return job.done
}

// run runs the queued jobs until the queue is empty.
func (d *declarer) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		job := d.next
		d.next = nil
		if job == nil {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		notices := d.runJob(job)
		d.mu.Lock()
		d.notices = notices
		d.mu.Unlock()
		close(job.done)
	}
}

// runJob runs one job. A panic in it is a defect reached by one client:
// it is recovered and logged, and the declarer goes on with the next job.
func (d *declarer) runJob(job *declareJob) (notices []string) {
	defer recovery.Recover(d.log, "scaling declarations")
	return d.declare(d.ctx, job)
}

// lastNotices returns the notices of the last job run.
func (d *declarer) lastNotices() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.notices
}

// close refuses further jobs and waits for the job in flight and the one
// waiting, so that their records are written before the session leaves
// the controller. It blocks for at most two jobs' declareTimeout.
func (d *declarer) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
}

// declarers holds the declarer of each attached session. It is safe for
// concurrent use.
type declarers struct {
	declare func(context.Context, *declareJob) []string // each declarer's
	stats   declareStats                                // every declarer's
	log     *slog.Logger                                // each declarer's

	mu sync.Mutex // guards m
	m  map[string]*declarer
}

// declareStats counts, for the metrics, what the declarers did so as not
// to hold up acks. It is safe for concurrent use.
type declareStats struct {
	coalesced atomic.Int64 // jobs replaced by a newer one before they ran
	late      atomic.Int64 // acks sent before their announcement's jobs were done
}

// get returns the declarer of session, created on first use with ctx, the
// session's context, as its lifetime.
func (ds *declarers) get(ctx context.Context, session string) *declarer {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.m[session]
	if d == nil {
		d = &declarer{ctx: ctx, declare: ds.declare, stats: &ds.stats, log: ds.log}
		ds.m[session] = d
	}
	return d
}

// close forgets the declarer of session, after waiting for its jobs (see
// declarer.close).
func (ds *declarers) close(session string) {
	ds.mu.Lock()
	d := ds.m[session]
	delete(ds.m, session)
	ds.mu.Unlock()
	if d != nil {
		d.close()
	}
}
