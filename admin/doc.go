// Package admin owns the admin API of aperio-server: who may call it (the
// master token, or an apk_ admin key with a role inside one organization),
// what each caller sees (its own organization, or everything for the master
// token), the HTTP handlers under /aperio/api with their OpenAPI
// description, the audit entries they write, and Client, the Go client of
// the same API that `aperio-client api` is built on.
package admin
