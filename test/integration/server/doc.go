// Package server holds the gateway's whole-stack tests: each starts, in
// process, a gateway serving real TCP on 127.0.0.1:0, agents tunnelled to
// it and httptest backends behind them (internal/server/servertest), and
// asserts what a visitor and an app see: HTTP/1.1, HTTP/2, WebSocket, gRPC
// and server-sent events through the tunnel; streamed bodies and raw TLS
// passthrough; TCP ports and who owns them; body and response bounds;
// hostile visitors and hostile clients; drains, restarts, reloads and
// maintenance; health probes, access logs, traces and metrics; the
// router's queues, limits, adaptive limits, cold starts and failover
// across clients; webhooks and retired instances; access control (basic,
// OIDC, share links, forward auth); admin sessions, admin hosts and admin
// OIDC; automatic TLS against Debian's pebble; token expiry. Tests that
// need a hook of internal/server's own (a ...ForTest in its
// export_test.go) stay there.
//
// The package has no code of its own; its tests run in plain go test
// (make test runs them), or alone with
//
//	go test -race ./test/integration/server/
//
// Each server's store is its own SQLite file (servertest.Config); the one
// test of two servers sharing a store, TestPortOwnershipAcrossServers,
// needs PostgreSQL and skips, naming APERIO_TEST_POSTGRES_DSN, without
// it. The automatic TLS test needs Debian's pebble: without it it skips,
// and under CI=true it fails.
package server
