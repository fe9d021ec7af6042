// Package recovery turns a panic in the goroutine of one request, one
// stream or one connection into a logged, counted event, so that a bug
// reached by one visitor or one client cannot take the process down.
//
// Only goroutine roots that serve one unit of work defer Recover; setup
// code and long-lived loops whose death would leave the process broken
// do not.
package recovery

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aperio-dev/aperio/internal/logkey"
)

// total counts recovered panics over the life of the process. It is
// process-wide on purpose: a panic is a defect of the binary, and the
// metric that reports it (aperio_panics_recovered_total) is one series.
var total atomic.Int64

// Total returns how many panics Recover has caught since the process
// started. Safe for concurrent use.
func Total() int64 { return total.Load() }

// Recover must be called directly by a deferred statement at the root of
// a goroutine that serves one request, stream or connection:
//
//	defer recovery.Recover(logger, "tunnel stream")
//
// When the goroutine panics it logs the value and the stack at error
// level under where (nil logger: slog.Default), counts it and returns
// normally, ending that goroutine only. In a test binary an unexpected
// panic is re-raised after it is counted, so that tests fail loudly; a
// test that provokes one on purpose calls AllowForTest first.
func Recover(logger *slog.Logger, where string) {
	v := recover()
	if v == nil {
		return
	}
	total.Add(1)
	if logger == nil {
		logger = slog.Default()
	}
	logger.Error("panic recovered", logkey.Where, where, logkey.Panic, fmt.Sprint(v), logkey.Stack, string(debug.Stack()))
	if testing.Testing() && !allowed() {
		panic(fmt.Sprintf("recovery: unexpected panic in %s: %v", where, v))
	}
}

var (
	allowMu sync.Mutex // guards allowN
	allowN  int
)

func allowed() bool {
	allowMu.Lock()
	defer allowMu.Unlock()
	return allowN > 0
}

// AllowForTest lets Recover swallow panics (instead of re-raising them in
// a test binary) until the test ends. Tests that call it must not run in
// parallel with tests that rely on loud failures.
func AllowForTest(t testing.TB) {
	t.Helper()
	allowMu.Lock()
	allowN++
	allowMu.Unlock()
	t.Cleanup(func() {
		allowMu.Lock()
		allowN--
		allowMu.Unlock()
	})
}
