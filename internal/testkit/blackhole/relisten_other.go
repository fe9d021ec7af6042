//go:build !unix

package blackhole

import "errors"

// relisten fails: only unix kernels are known to drop SYNs beyond a
// full accept queue, and so to keep a dial hanging.
func relisten(uintptr) error { return errors.New("blackhole: unix only") }
