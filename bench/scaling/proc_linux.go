package main

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the child in a process group of its own and has the
// kernel kill it if the harness dies without cleaning up (SIGKILL,
// a crash): no run leaves a process behind.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to p's process group, whose id is p's pid
// (Setpgid). It is called only while p has not been reaped, so the id
// cannot have been reused.
func killGroup(p *proc) {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}
