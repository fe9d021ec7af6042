//go:build linux

package main

import (
	"errors"
	"fmt"
	"github.com/aperio-dev/aperio/bench/internal/benchproc"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one process the soak started: its own process group and
// directory, stdout and stderr in output.log there. It dies with the
// harness (Pdeathsig), and kids.stopAll stops whatever is left.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, set before done closes
}

// children tracks the running children; safe for concurrent use.
type children struct {
	dir string

	mu   sync.Mutex // guards the following fields
	seq  int
	live map[*child]bool
}

func newChildren(dir string) *children { return &children{dir: dir, live: map[*child]bool{}} }

// start runs bin with args in a fresh directory under ks.dir, with env on
// top of the harness's environment less every APERIO_* variable and HOME
// (so no file or setting of the caller's leaks in).
func (ks *children) start(name, bin string, args, env []string) (*child, error) {
	ks.mu.Lock()
	ks.seq++
	dir := filepath.Join(ks.dir, fmt.Sprintf("%03d-%s", ks.seq, name))
	ks.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "APERIO_") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "HOME="+dir), env...)
	cmd.Stdout, cmd.Stderr = out, out
	benchproc.Isolate(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: out.Name(), done: make(chan struct{})}
	ks.mu.Lock()
	ks.live[c] = true
	ks.mu.Unlock()
	go func() {
		c.err = cmd.Wait()
		out.Close()
		ks.mu.Lock()
		delete(ks.live, c)
		ks.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for the exit, then kills the
// process group. It returns the exit error (nil for status 0) or says it
// had to kill.
func (c *child) stop(grace time.Duration) error {
	if !c.exited() {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-c.done:
		return c.err
	case <-time.After(grace):
	}
	benchproc.KillGroup(c.pid())
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
	}
	return errors.New(c.name + " did not exit within " + grace.String() + " of SIGTERM: killed")
}

// stopAll stops every child still running, at once, each within grace.
func (ks *children) stopAll(grace time.Duration) {
	ks.mu.Lock()
	var wg sync.WaitGroup
	for c := range ks.live {
		wg.Go(func() { c.stop(grace) })
	}
	ks.mu.Unlock()
	wg.Wait()
}
