//go:build windows

package main

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sys/windows/svc"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// serviceContext returns, when the client runs under the Windows service
// manager (sc.exe create ... binPath= "aperio-client.exe --config ..."),
// a context that its stop and shutdown requests end, the way SIGTERM ends
// it elsewhere, and a function to call once the client has stopped: the
// service reports "stopped" only then, after the drain. Run interactively,
// it returns ctx unchanged.
func serviceContext(ctx context.Context, log *slog.Logger) (context.Context, func()) {
	is, err := svc.IsWindowsService()
	if err != nil || !is {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &service{stop: cancel, done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(h.ended)
		if err := svc.Run("aperio-client", h); err != nil {
			log.Error("windows service manager", logkey.Err, err)
		}
		cancel()
	}()
	return ctx, func() {
		close(h.done)
		// The manager's side returns once Execute reported stopped.
		select {
		case <-h.ended:
		case <-time.After(5 * time.Second):
		}
	}
}

// service answers the Windows service manager for the client.
type service struct {
	stop  context.CancelFunc
	done  chan struct{} // closed once the client stopped
	ended chan struct{} // closed once svc.Run returned
}

// drainHint is the wait the service manager is told to allow while the
// client drains (drain_timeout is 30 s by default).
const drainHint = 40 * time.Second

func (s *service) Execute(_ []string, requests <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case <-s.done: // the client stopped by itself (idle_timeout, refused)
			status <- svc.Status{State: svc.Stopped}
			return false, 0
		case c := <-requests:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending, WaitHint: uint32(drainHint / time.Millisecond)}
				s.stop()
				<-s.done
				status <- svc.Status{State: svc.Stopped}
				return false, 0
			}
		}
	}
}
