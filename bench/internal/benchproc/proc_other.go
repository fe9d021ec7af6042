//go:build !linux

package benchproc

import (
	"os"
	"os/exec"
)

// Isolate leaves the process in the harness's process group: process
// groups and parent-death signals are set up on Linux only.
func Isolate(cmd *exec.Cmd) {}

// KillGroup kills the process itself.
func KillGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}
