// Package apiclient owns the Go side of the admin API as a caller sees it:
// Client, one method per route under /aperio/api, and the wire types its
// requests and answers are made of (organizations, keys, tokens, clients,
// scaling records, webhooks, maintenance, audit entries, explanations).
//
// It imports only the standard library, so that aperio-client, which is
// built on it, does not link the server: package admin serves these types
// (it aliases them), and router builds Explanation. Keep it that way; a test
// in cmd/aperio-client fails if the client links a server package again.
package apiclient
