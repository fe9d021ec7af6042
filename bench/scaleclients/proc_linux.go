//go:build linux

package main

import "syscall"

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
