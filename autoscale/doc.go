// Package autoscale owns the autoscaling decisions: which binds
// (organization, hostname, path) carry a scaling declaration, when their
// pool is saturated or idle for long enough to ask the provider for one
// instance more or one fewer, when an empty pool must be cold started, and
// how often and how politely the provider's hook may be called (single
// flight, cooldown, exponential backoff, the breaker that disarms a record
// after five failures, a global cap of eight calls in flight, per-host 429
// penalties, Retry-After and a global start budget).
//
// It decides and records; it does not route, hold requests, or speak HTTP.
// The router supplies the live pool figures (PoolView) and holds visitors
// on a Start; the server supplies the fenced HTTP client (Caller), the
// store (Store) and the webhook fan-out (Events). Sessions is the
// declaration protocol with tunnel sessions: the server hands it each
// announcement the router applied and each session's end, and it declares
// the scaling blocks to the Controller and answers refusals.
//
// Every time rule reads the time package directly; the tests run them in a
// testing/synctest bubble, so no test sleeps on a real clock.
package autoscale
