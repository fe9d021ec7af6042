// Package process holds the process tests: each runs the built
// aperio-server and aperio-client binaries as processes on 127.0.0.1:0,
// with httptest backends behind them, and asserts what a visitor, an
// operator and the processes' logs see: signals (SIGTERM drains, SIGHUP
// and edits of the config files reload, a SIGKILLed client fails over),
// sd_notify, an operator's drain, status --require-connected, backend
// settings and resilience (TLS, gRPC), balancing, binding rules, token
// and server limits, traffic policies, error and maintenance pages,
// public TCP ports and TLS passthrough, debug_listen, explain,
// autoscaling, and two servers on one PostgreSQL database.
// internal/testkit/procs builds both binaries once for the whole package
// (TestMain), and harness_test.go holds the one set of helpers that
// start, watch and stop them. Tests that call a command's own functions
// stay in cmd/aperio-server and cmd/aperio-client.
//
// The package has no code of its own; its tests run in plain go test
// (make test runs them), or alone with
//
//	go test -race ./test/integration/process/
//
// The test of two servers on one database needs APERIO_TEST_POSTGRES_DSN:
// without it it skips, naming the variable.
package process
