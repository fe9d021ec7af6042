//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

func setProcAttr(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func raiseNofile() (uint64, error) {
	return 0, errors.New("scaleclients measures through /proc: Linux only")
}
