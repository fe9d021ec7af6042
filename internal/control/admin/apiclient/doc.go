// Package apiclient owns the Go side of the admin API as a caller sees it:
// Client, one method per route under /aperio/api, and ResponseError for its
// failures. The requests and answers it sends and decodes are the types of
// package wire.
//
// It imports only the standard library and wire, so that aperio-client,
// which is built on it, does not link the server. Keep it that way; a test
// in cmd/aperio-client fails if the client links a server package again.
// Only the CLI imports it: the server's packages use wire directly.
package apiclient
