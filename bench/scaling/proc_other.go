//go:build !linux

package main

import "os/exec"

// setProcAttr leaves the child in the harness's process group: process
// groups and parent-death signals are set up on Linux only.
func setProcAttr(cmd *exec.Cmd) {}

// killGroup kills p itself.
func killGroup(p *proc) {
	p.cmd.Process.Kill()
}
