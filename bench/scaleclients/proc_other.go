//go:build !linux

package main

import "errors"

func raiseNofile() (uint64, error) {
	return 0, errors.New("scaleclients measures through /proc: Linux only")
}
