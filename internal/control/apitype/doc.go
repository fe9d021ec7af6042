// Package wire owns the admin API's JSON types (the bodies of its requests
// and answers: organizations, keys, tokens, clients, scaling records,
// webhooks, maintenance, audit entries, explanations) and the constants
// both binaries share (the API's path prefix, roles, webhook events,
// explain steps and outcomes).
//
// It imports only the standard library and sits below every other package:
// admin serves these types, router and autoscale build them, and the Go
// client in admin/apiclient decodes them, so that aperio-client speaks the
// API without linking the server. A test in this package fails if it
// imports anything outside the standard library.
package apitype
