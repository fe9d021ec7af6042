package benchproc

import (
	"os/exec"
	"syscall"
)

// Isolate puts cmd's process in a process group of its own and has the
// kernel kill it if the harness dies without cleaning up (SIGKILL, a
// crash). Call it before cmd.Start.
func Isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// KillGroup sends SIGKILL to the process group of pid, a process started
// with Isolate (its group id is its pid). Call it only while the process
// has not been reaped, so that the id cannot have been reused.
func KillGroup(pid int) {
	syscall.Kill(-pid, syscall.SIGKILL)
}
