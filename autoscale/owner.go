package autoscale

import (
	"context"
	"errors"

	"github.com/aperio-dev/aperio/internal/recovery"
)

// The controller's decision state has one owner: the goroutine ownerLoop,
// started by New. Only functions run by the owner (the *Locked methods,
// whose name predates the owner and now means "runs on the owner") read
// or write it. Everything else, the public methods, the sample, reload,
// dispatch and change loops, and the workers that call hooks and write
// the store, hands the owner a request (do) and waits for its reply; the
// I/O stays in the caller's goroutine or in a worker, and the plan*
// functions the handlers call stay pure.
//
// A handler never blocks and never does I/O, so the owner answers each
// request in the time of a map lookup or a plan; a caller's wait for the
// reply is bounded by the requests queued before its own.

// errOwnerPanic is the reply to a request whose handler panicked: the
// owner recovered, logged and counted it (internal/recovery) and goes on
// serving, and a reload is asked for so that the records are taken again
// from the store.
var errOwnerPanic = errors.New("autoscale: controller request panicked")

// request is one piece of work for the owner: f runs on the owner's
// goroutine, and done receives nil once it has, or errOwnerPanic.
type request struct {
	f    func()
	done chan error // 1-buffered: the owner never waits for the caller
}

// ownerLoop serves requests until stopOwner is closed (Run's end, or
// Close before any Run).
func (c *Controller) ownerLoop() {
	defer close(c.ownerDone)
	for {
		select {
		case r := <-c.reqs:
			r.done <- c.serve(r.f)
		case <-c.stopOwner:
			return
		}
	}
}

// serve runs f, turning a panic into errOwnerPanic: a bug reached by one
// request must not stop the owner, or every later call would fail.
func (c *Controller) serve(f func()) (err error) {
	err = errOwnerPanic // kept only when f panics: Recover returns normally
	defer func() {
		if err != nil {
			c.signalReload()
		}
	}()
	defer recovery.Recover(c.log, "autoscale controller")
	f()
	return nil
}

// do runs f on the owner and waits for it. It returns ErrClosed once the
// owner has stopped (f did not run), ctx's error if ctx ends before the
// owner takes f (f did not run), or errOwnerPanic if f panicked (f ran
// part way). Never call it from the owner: it would wait for itself.
func (c *Controller) do(ctx context.Context, f func()) error {
	r := request{f: f, done: make(chan error, 1)}
	select {
	case c.reqs <- r:
	case <-c.ownerDone:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// The owner answers every request it took, panic or not.
	return <-r.done
}

// signalReload asks the reload loop for a reload soon.
func (c *Controller) signalReload() {
	select {
	case c.reload <- struct{}{}:
	default:
	}
}

// endOwner stops the owner and waits for it to exit. It is idempotent.
func (c *Controller) endOwner() {
	c.stopping.Do(func() { close(c.stopOwner) })
	<-c.ownerDone
}

// Close stops the controller: a Run in progress returns (as when its ctx
// ends), and the owner goroutine New started exits; a controller that was
// never Run must be closed, or its owner goroutine stays. Every call after
// Close answers at once: ErrClosed, or where there is no error to return
// a zero answer (Metrics: the figures the controller stopped with). Close
// is idempotent and safe for concurrent use; it returns once the
// controller's goroutines have exited, and always nil (the error is
// io.Closer's).
func (c *Controller) Close() error {
	c.closing.Do(func() { close(c.quit) })
	if c.started.CompareAndSwap(false, true) {
		// Run never ran and now never will: stop the owner here, keeping
		// the figures for Metrics.
		// An error here is a panic the owner recovered and logged.
		_ = c.do(context.Background(), func() { c.final = c.metricsLocked() })
		c.endOwner()
		close(c.done)
		return nil
	}
	<-c.done
	return nil
}
