// Package admin owns the admin API of aperio-server: who may call it (the
// master token, or an apk_ admin key with a role inside one organization),
// what each caller sees (its own organization, or everything for the master
// token), the HTTP handlers under /aperio/api with their OpenAPI
// description and the audit entries they write. The API's JSON types live
// in package wire, which admin aliases (Token, Org, ...); its Go client is
// admin/apiclient, which aperio-client links without the server.
package admin
