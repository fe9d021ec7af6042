//go:build unix

package blackhole

import "syscall"

// relisten sets the listen backlog of the listening socket fd to 0.
func relisten(fd uintptr) error { return syscall.Listen(int(fd), 0) }
