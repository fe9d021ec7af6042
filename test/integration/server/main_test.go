package server_test

import (
	"testing"

	"github.com/aperio-dev/aperio/internal/server/servertest"
)

// Every test here calls t.Parallel(): each starts its own servers, agents,
// backends and store on ports of 127.0.0.1:0 and spends most of its time
// waiting on the network. A test that calls t.Setenv or changes something
// process-wide must not.

// TestMain ends the run with servertest's goroutine leak check.
func TestMain(m *testing.M) { servertest.Main(m, nil) }
