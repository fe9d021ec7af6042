// Package debughttp owns the debug listener of both binaries (debug_listen):
// net/http/pprof (CPU, heap, allocation, goroutine and mutex profiles, and
// runtime/trace) and the runtime's own metrics as JSON, on an address of
// its own that only a loopback address may be. It is an operator's tool,
// off unless debug_listen is set; nothing of it is served on the public or
// admin listeners.
package debughttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// MaxSeconds bounds the seconds parameter of the profiles that run for a
// while (/debug/pprof/profile, /debug/pprof/trace and the delta profiles
// such as heap?seconds=N): a longer ask is answered 400, so that one
// request cannot hold a connection, or the CPU profiler, for long.
const MaxSeconds = 60

// The debug listener's timeouts. A profile writes nothing until it ends,
// so the write timeout covers MaxSeconds and the encoding after it;
// net/http/pprof itself refuses a profile longer than the write timeout.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = MaxSeconds*time.Second + 30*time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 16 << 10
)

// ErrNotLoopback is returned (wrapped) for a debug_listen address whose
// host is not a loopback address: profiles show the process's code,
// memory and command line to whoever reaches them.
var ErrNotLoopback = errors.New("debughttp: debug_listen must be a loopback address (127.0.0.1, ::1 or localhost)")

// CheckAddr reports why addr cannot be debug_listen, or nil: it must be
// host:port, the host localhost or a loopback IP address (127.0.0.0/8,
// ::1) with no zone, the port 0 to 65535. An empty host (":6060", which
// would bind every interface), 0.0.0.0, :: and any other address wrap
// ErrNotLoopback.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not a host:port address", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q is not a host:port address", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" || !ip.Unmap().IsLoopback() {
		what := host
		if what == "" {
			what = "an empty host (every interface)"
		}
		return fmt.Errorf("%s in %q: %w", what, addr, ErrNotLoopback)
	}
	return nil
}

// Server is a running debug listener. Its methods are safe for concurrent
// use.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{} // closed when the serve loop returned
}

// Listen binds addr, which must pass CheckAddr and resolve to a loopback
// address, and serves Handler on it until Shutdown. It does not block. An
// address in use is an error naming debug_listen and the address. A nil
// log discards.
func Listen(addr string, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := CheckAddr(addr); err != nil {
		return nil, fmt.Errorf("debug_listen: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug_listen %s: %w", addr, err)
	}
	// localhost is resolved by the system: a hosts file that maps it
	// elsewhere must not expose the profiles.
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("debug_listen %s bound %s: %w", addr, ln.Addr(), ErrNotLoopback)
	}
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           Handler(log),
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug listener stopped", logkey.Err, err)
		}
	}()
	log.Info("debug listening", logkey.Addr, ln.Addr().String())
	return s, nil
}

// Addr is the address the listener is bound to (the port chosen for :0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// closeGrace is how long Close lets requests in flight finish.
const closeGrace = time.Second

// Close is Shutdown with a grace of one second: what the binaries call
// when they stop, the debug listener last.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	s.Shutdown(ctx)
}

// Shutdown stops accepting, lets the requests in flight finish until ctx
// ends, then closes what is left (a profile still running is cut short),
// and returns once the serve loop has exited. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	<-s.done
}
