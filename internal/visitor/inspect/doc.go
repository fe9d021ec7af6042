// Package inspect owns the request inspector: opt-in captures, one per
// hostname and bounded in time and count, of the requests the router
// serves for it. A capture keeps each request's and response's head
// (with credentials redacted) and the first bytes of their bodies in a
// bounded in-memory ring, never on disk, with the request's timeline;
// the admin API lists, shows and replays them (docs/inspector.md).
//
// The router asks an Inspector for a hostname's Capture on every request
// (Lookup: one atomic load while nothing is captured); a Capture's
// Recording tees the body as it is read and wraps the ResponseWriter,
// changing nothing of what the backend and the visitor see.
package inspect
