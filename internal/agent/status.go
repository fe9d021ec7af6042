package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aperio-dev/aperio/internal/agent/limiter"
	"github.com/aperio-dev/aperio/internal/config"
	"github.com/aperio-dev/aperio/internal/logkey"
	"github.com/aperio-dev/aperio/tunnel"
)

// Status is what a running client tells `aperio-client status` over its
// status socket.
type Status struct {
	// Name and InstanceID identify the client process.
	Name       string `json:"name"`
	InstanceID string `json:"instance_id"`
	// PID is the client's process id.
	PID int `json:"pid"`
	// Socket is the path of the socket that answered.
	Socket string `json:"socket"`
	// Draining is set once the client stopped taking new requests.
	Draining bool `json:"draining"`
	// Retired is "idle" once idle_timeout retired a client whose
	// idle_action is wait: drained, disconnected, waiting for SIGTERM.
	Retired string `json:"retired,omitempty"`
	// Debug is the debug listener's address (debug_listen), empty when
	// there is none.
	Debug string `json:"debug,omitempty"`
	// InFlight counts the requests being served now, over every tunnel.
	InFlight int64 `json:"inflight"`
	// Tunnels lists the servers the client holds tunnels to, in the
	// configured order, and whether each is connected now.
	Tunnels []TunnelStatus `json:"tunnels"`
	// Services lists the configured services in order.
	Services []ServiceStatus `json:"services"`
	// Exposed lists each server's answer to each expose entry: the public
	// address, or why it was refused.
	Exposed []ExposedStatus `json:"exposed,omitempty"`
}

// TunnelStatus is one server in a Status.
type TunnelStatus struct {
	Server    string `json:"server"`
	Connected bool   `json:"connected"`
}

// Connected counts the tunnels that are up.
func (st Status) Connected() int {
	n := 0
	for _, t := range st.Tunnels {
		if t.Connected {
			n++
		}
	}
	return n
}

// ServiceStatus is one service in a Status.
type ServiceStatus struct {
	ID        string   `json:"id"`
	Target    string   `json:"target"`
	Hostnames []string `json:"hostnames"`
	Path      string   `json:"path,omitempty"`
	Healthy   bool     `json:"healthy"`
	// Draining is set while a reload's removal of the service waits for
	// its requests in flight.
	Draining bool `json:"draining,omitempty"`
	// Concurrency is the limiter's snapshot, nil when the service
	// announces no limit.
	Concurrency *limiter.Snapshot `json:"concurrency"`
}

// Status returns the client's current status.
func (a *Agent) Status() Status {
	st := Status{
		Name:       a.cfg.Name,
		InstanceID: a.instanceID,
		PID:        os.Getpid(),
		Socket:     a.statusSocket,
		Draining:   a.draining.Load(),
		Retired:    a.retiredReason(),
		InFlight:   a.active(),
	}
	st.Debug, _ = a.debugAddr.Load().(string)
	for _, tc := range a.tunnels {
		st.Tunnels = append(st.Tunnels, TunnelStatus{Server: tc.URL(), Connected: tc.Connected()})
	}
	for _, svc := range a.services() {
		if svc.withdrawn.Load() {
			continue
		}
		target := svc.cfg.Target
		if svc.cfg.Serve != "" {
			target = "serve " + svc.cfg.Serve
		}
		ss := ServiceStatus{ID: svc.id, Target: target, Hostnames: svc.cfg.Hostnames, Path: svc.cfg.Path, Healthy: svc.announcedHealthy(), Draining: svc.draining.Load()}
		if svc.limiter != nil {
			snap := svc.limiter.Snapshot()
			ss.Concurrency = &snap
		}
		st.Services = append(st.Services, ss)
	}
	st.Exposed = a.exposedStatus()
	return st
}

// statusPath is the URL path the status socket answers on.
const statusPath = "/status"

// statusServer answers `aperio-client status` on a unix socket.
type statusServer struct {
	a    *Agent
	ln   net.Listener
	srv  *http.Server
	path string
}

// openStatus opens the status socket: status_socket, or PID.sock in
// config.StatusDir(). Failing to open it costs only the status command, so
// it is logged, not fatal. Nil when it is off or could not be opened.
func (a *Agent) openStatus() *statusServer {
	path := a.statusSocket
	switch path {
	case config.StatusSocketOff:
		return nil
	case "":
		path = filepath.Join(config.StatusDir(), strconv.Itoa(os.Getpid())+".sock")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		a.log.Warn("status socket unavailable", logkey.Path, path, logkey.Err, err)
		return nil
	}
	// A socket file left by a dead process with our pid (or a previous run
	// with this path) would make Listen fail; nobody answers on it.
	if _, err := os.Stat(path); err == nil && !answers(path) {
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		a.log.Warn("status socket unavailable", logkey.Path, path, logkey.Err, err)
		return nil
	}
	a.statusSocket = path
	s := &statusServer{a: a, ln: ln, path: path}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.Status())
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	a.log.Debug("status socket open", logkey.Path, path)
	return s
}

func (s *statusServer) serve() {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.a.log.Warn("status socket failed", logkey.Err, err)
	}
}

// close stops the server and removes the socket file.
func (s *statusServer) close() {
	s.srv.Close()
	os.Remove(s.path)
}

// answers reports whether something accepts connections on the socket.
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ErrNoClient is returned by ReadStatuses when no running client answers.
var ErrNoClient = errors.New("agent: no aperio-client is running (no status socket answered)")

// ReadStatus asks the client listening on the unix socket path for its
// status.
func ReadStatus(ctx context.Context, path string) (Status, error) {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		Proxy: nil,
	}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://aperio-client"+statusPath, nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("agent: status of %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("agent: status of %s: %s", path, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("agent: status of %s: %w", path, err)
	}
	return st, nil
}

// ReadStatuses asks every client with a socket in dir (the *.sock files
// of config.StatusDir()), or the one socket when path is set. Sockets that
// do not answer (a client that died) are skipped. It returns ErrNoClient
// when none answered.
func ReadStatuses(ctx context.Context, dir, path string) ([]Status, error) {
	paths := []string{path}
	if path == "" {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("agent: read %s: %w", dir, err)
		}
		paths = paths[:0]
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sock") {
				paths = append(paths, filepath.Join(dir, e.Name()))
			}
		}
	}
	var out []Status
	for _, p := range paths {
		st, err := ReadStatus(ctx, p)
		if err != nil {
			continue
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, ErrNoClient
	}
	slices.SortFunc(out, func(x, y Status) int { return x.PID - y.PID })
	return out, nil
}

// retiredReason is Status.Retired.
func (a *Agent) retiredReason() string {
	if a.retired.Load() {
		return tunnel.RetiringIdle
	}
	return ""
}
