//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the child in a process group of its own and has the
// kernel kill it if the harness dies without cleaning up.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// raiseNofile lifts RLIMIT_NOFILE's soft limit to the hard one, for this
// process and (set explicitly, so Go does not restore the old one in
// children) for every process it starts.
func raiseNofile() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	r.Cur = r.Max
	return r.Cur, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
}
