package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/bench/internal/benchproc"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the harness: its own process group, its
// output in a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string // path of its stdout and stderr
	// found yields the last submatch of the first output line matching
	// the spec's watch pattern; it stays empty without one.
	found chan string
	done  chan struct{} // closed once Wait returned
	err   error         // Wait's result, written before done is closed
}

// procs starts and stops every child process of one harness run. It is
// safe for concurrent use. Whatever it started is stopped by stopAll.
type procs struct {
	dir string // where the processes' directories and logs go

	mu   sync.Mutex // guards the following fields
	live map[*proc]bool
	seq  int
}

func newProcs(dir string) *procs {
	return &procs{dir: dir, live: map[*proc]bool{}}
}

// spec says how to start one process.
type spec struct {
	name  string
	path  string
	args  []string
	env   []string       // on top of the harness's environment without APERIO_*
	dir   string         // working directory; "" makes a fresh one
	watch *regexp.Regexp // an output line to report on proc.found; nil for none
}

// newDir makes a fresh directory named after name under ps.dir.
func (ps *procs) newDir(name string) (string, error) {
	ps.mu.Lock()
	ps.seq++
	id := fmt.Sprintf("%03d-%s", ps.seq, name)
	ps.mu.Unlock()
	dir := filepath.Join(ps.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// start starts sp. The process runs in a process group of its own (so that
// a terminal's Ctrl-C reaches only the harness, which stops it), with a
// working directory and HOME of its own (so that no aperio.yaml or
// aperio-server.yaml of the caller's directory is read), and with no
// APERIO_* variable of the harness's environment.
func (ps *procs) start(sp spec) (*proc, error) {
	dir := sp.dir
	if dir == "" {
		d, err := ps.newDir(sp.name)
		if err != nil {
			return nil, err
		}
		dir = d
	}
	logPath := filepath.Join(dir, "output.log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(sp.path, sp.args...)
	cmd.Dir = dir
	cmd.Env = append(childEnv(os.Environ(), dir), sp.env...)
	p := &proc{name: sp.name, cmd: cmd, log: logPath, found: make(chan string, 1), done: make(chan struct{})}
	w := &lineWatcher{out: f, re: sp.watch, found: p.found}
	cmd.Stdout, cmd.Stderr = w, w
	// A grandchild holding the output pipe must not keep Wait from
	// returning.
	cmd.WaitDelay = 2 * time.Second
	benchproc.Isolate(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", sp.name, err)
	}
	ps.mu.Lock()
	ps.live[p] = true
	ps.mu.Unlock()
	// This goroutine is joined through p.done, which stop and stopAll
	// wait for.
	go func() {
		p.err = cmd.Wait()
		f.Close()
		ps.mu.Lock()
		delete(ps.live, p)
		ps.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// childEnv is env without APERIO_* and HOME, plus HOME=home.
func childEnv(env []string, home string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.HasPrefix(kv, "APERIO_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+home)
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFound waits up to timeout for p's watched line and returns its
// submatch. It fails early when p exits, quoting the end of its log.
func (p *proc) waitFound(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s := <-p.found:
		return s, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited (%v) before it was ready; log %s ends: %s", p.name, p.err, p.log, logTail(p.log))
	case <-t.C:
		return "", fmt.Errorf("%s not ready within %v; log %s ends: %s", p.name, timeout, p.log, logTail(p.log))
	}
}

// stop sends p SIGTERM, waits up to grace for it to exit, then kills its
// process group. It returns p's exit error (nil for exit status 0), or an
// error saying it had to be killed. It returns within grace plus 5 s.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return p.err
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		benchproc.KillGroup(p.cmd.Process.Pid)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
	}
	benchproc.KillGroup(p.cmd.Process.Pid)
	k := time.NewTimer(5 * time.Second)
	defer k.Stop()
	select {
	case <-p.done:
		return fmt.Errorf("%s killed after %v without exiting on SIGTERM", p.name, grace)
	case <-k.C:
		return fmt.Errorf("%s still running 5s after SIGKILL", p.name)
	}
}

// stopAll stops every process still running: SIGTERM to all at once, up
// to grace for them to exit, then SIGKILL to their process groups. It
// returns within grace plus 5 s.
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	live := make([]*proc, 0, len(ps.live))
	for p := range ps.live {
		live = append(live, p)
	}
	ps.mu.Unlock()
	for _, p := range live {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			benchproc.KillGroup(p.cmd.Process.Pid)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, p := range live {
		select {
		case <-p.done:
			continue
		case <-deadline.C:
		}
		break
	}
	for _, p := range live {
		if !p.exited() {
			benchproc.KillGroup(p.cmd.Process.Pid)
		}
	}
	final := time.NewTimer(5 * time.Second)
	defer final.Stop()
	for _, p := range live {
		select {
		case <-p.done:
		case <-final.C:
			return
		}
	}
}

// lineWatcher copies a process's output to out and reports the first line
// re matches on found. Output is written by one goroutine at a time (exec
// shares one pipe when Stdout and Stderr are the same writer).
type lineWatcher struct {
	out     io.Writer
	re      *regexp.Regexp
	found   chan<- string
	matched bool
	partial []byte // the line being written, so far
	// skipping is set while the rest of an overlong line is dropped.
	skipping bool
}

// maxWatchedLine bounds the bytes kept of a line being watched; a longer
// line is dropped unmatched.
const maxWatchedLine = 64 << 10

func (w *lineWatcher) Write(b []byte) (int, error) {
	n, err := w.out.Write(b)
	if w.re == nil || w.matched {
		return n, err
	}
	if w.skipping {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return n, err
		}
		w.skipping, b = false, b[i+1:]
	}
	w.partial = append(w.partial, b...)
	for !w.matched {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		if m := w.re.FindSubmatch(w.partial[:i]); m != nil {
			w.matched = true
			w.found <- string(m[len(m)-1])
		}
		w.partial = w.partial[i+1:]
	}
	if w.matched {
		w.partial = nil
	} else if len(w.partial) > maxWatchedLine {
		w.partial, w.skipping = nil, true
	}
	return n, err
}

// logTail returns the last line of the file at path, at most 300 bytes.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[len(s)-300:]
	}
	if s == "" {
		return "<empty>"
	}
	return s
}
