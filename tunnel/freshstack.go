package tunnel

import (
	"fmt"
	"runtime/debug"
)

// onFreshStack runs f on a goroutine of its own and returns what f
// returns; a panic in f panics the caller with f's panic value and stack
// (freshStackPanic), so the caller's recovery still sees it.
//
// A goroutine keeps the stack it grew to until a GC finds it using less
// than a quarter of it, and the runtime halves it at most once per cycle.
// A session's control goroutines live as long as the client is connected
// and spend nearly all of it blocked in a read or a select, but each
// heartbeat they decode (reflection-driven JSON), validate and apply (the
// registry's update: router, ports, audit, store) run deep call chains.
// Run on the long-lived goroutine, that work kept a grown stack per
// client; run here, it grows a short-lived stack that is freed when f
// returns and reused by the next heartbeat of any session. Measured at
// 3,000 idle clients (docs/performance.md): goroutine stacks 125.7 MB ->
// 85.2 MB, 14 KiB per client. The cost is one goroutine start per call,
// about a microsecond, beside the JSON decode it wraps.
func onFreshStack[T any](f func() (T, error)) (T, error) {
	type result struct {
		v     T
		err   error
		panic *freshStackPanic
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = &freshStackPanic{value: p, stack: debug.Stack()}
			}
			done <- r
		}()
		r.v, r.err = f()
	}()
	r := <-done
	if r.panic != nil {
		panic(r.panic)
	}
	return r.v, r.err
}

// freshStackPanic is a panic raised in onFreshStack's goroutine, carried
// to its caller with the stack where it happened.
type freshStackPanic struct {
	value any
	stack []byte
}

func (p *freshStackPanic) String() string {
	return fmt.Sprintf("%v\n\npanicked on a fresh stack:\n%s", p.value, p.stack)
}

// Unwrap returns the panic value if it is an error.
func (p *freshStackPanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

func (p *freshStackPanic) Error() string { return p.String() }
