// Package hangup owns what the binaries do on SIGHUP until configuration
// reloads exist: log it and keep running, rather than die by the signal's
// default action (a stray `kill -HUP` or a closed controlling terminal
// would otherwise take every tunnel down).
package hangup

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Message is logged, at info, for every SIGHUP received.
const Message = "SIGHUP ignored (reload not supported yet)"

// Ignore starts catching SIGHUP: each one is logged at info on log (nil
// discards) and otherwise ignored. The returned stop restores the default
// action and returns once the goroutine Ignore started has exited; it is
// idempotent.
func Ignore(log *slog.Logger) (stop func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ch := make(chan os.Signal, 1) // one pending signal is enough: more would log the same line
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ch:
				log.Info(Message)
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			wg.Wait()
		})
	}
}
